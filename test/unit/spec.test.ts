import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCampaignSpec, parseCampaignSpec, SpecError } from '../../config/io/spec';
import { learningRateAt, batchRows, planSteps } from '../../config/rules/schedule';
import { earlyStopState } from '../../config/rules/early-stop';
import { nextDataCall, pythonChecksOf } from '../../config/rules/python-calls';
import { campaignPythonChecks, workerVariablesOf } from '../../config/rules/preflight';

const valid = `name: tickets
provider:
  kind: local
  model: roundhouse/tiny-chat
data:
  train: data/train.jsonl
  eval: data/eval.jsonl
training:
  epochs: 2
  batchSize: 8
  learningRate: 0.01
  loraRank: 8
  maxSeqLen: 256
sampling:
  maxTokens: 4
evaluation:
  scorer: exact
`;

function specError(text: string, file = 'campaign.yaml'): SpecError {
  try {
    parseCampaignSpec(text, file);
  } catch (err) {
    if (err instanceof SpecError) return err;
    throw err;
  }
  throw new Error('expected a SpecError');
}

describe('campaign spec', () => {
  test('a valid spec gets its defaults and paths resolved against the spec file', () => {
    const spec = parseCampaignSpec(valid, '/work/x/campaign.yaml');
    expect(spec.data.train).toBe('/work/x/data/train.jsonl');
    expect(spec.training).toMatchObject({
      lrSchedule: { kind: 'constant' },
      segmentSteps: 1000,
      segmentSeconds: 1800,
      pipelineDepth: 2,
      adam: { beta1: 0.9 },
    });
    expect(spec.rounds).toMatchObject({ max: 1, continueFrom: 'checkpoint', nextData: { policy: 'mistakes' } });
    expect(spec.advanced.heartbeatTimeoutSeconds).toBe(30);
  });

  test('JSON specs are accepted too', () => {
    const json = JSON.stringify({
      name: 'j',
      provider: { kind: 'together', model: 'Qwen/Qwen3-8B' },
      data: { train: 'a', eval: 'b' },
      training: { epochs: 1, batchSize: 1, learningRate: 1e-4, loraRank: 8, maxSeqLen: 512 },
      sampling: { maxTokens: 8 },
      evaluation: { scorer: 'contains' },
    });
    expect(parseCampaignSpec(json, 'c.json').provider.kind).toBe('together');
  });

  test.each([
    ['epochs below 1', valid.replace('epochs: 2', 'epochs: 0'), 9, 'training.epochs', /expected number to be >=1|Too small/i],
    ['a misspelt field', valid.replace('batchSize: 8', 'batchsize: 8'), 10, 'training.batchsize', /not a known field/],
    ['a missing section', valid.replace(/sampling:\n {2}maxTokens: 4\n/, ''), undefined, 'sampling', /required/],
    ['an unknown provider kind', valid.replace('kind: local', 'kind: openai'), 3, 'provider.kind', /local|together|baseten/],
    [
      'a regex scorer without a pattern',
      valid.replace('scorer: exact', 'scorer: regex'),
      17,
      'evaluation.pattern',
      /required when scorer is regex/,
    ],
    ['a string where a number belongs', valid.replace('learningRate: 0.01', 'learningRate: fast'), 11, 'training.learningRate', /number/],
  ])('%s is named with file, line and field', (_what, text, line, field, problem) => {
    const err = specError(text);
    expect(err.field).toBe(field);
    if (line !== undefined) expect(err.line).toBe(line);
    expect(err.message).toMatch(
      new RegExp(`^campaign\\.yaml${line !== undefined ? `:${line}` : '(:\\d+)?'} ${field.replace('.', '\\.')}: `),
    );
    expect(err.message).toMatch(problem);
  });

  const grpo = `${valid.replace('maxTokens: 4', 'maxTokens: 4\n  temperature: 1')}round:
  kind: grpo
  grpo:
    groupSize: 4
    reward:
      kind: numeric
`;
  test('round kinds: sft by default; grpo and dpo with their defaults', () => {
    expect(parseCampaignSpec(valid, 'c.yaml').round).toEqual({ kind: 'sft' });
    expect(parseCampaignSpec(grpo, 'c.yaml').round.grpo).toMatchObject({
      groupSize: 4,
      reward: { kind: 'numeric' },
      loss: { type: 'grpo', beta: 0 },
      maxStepsOffPolicy: 0,
    });
    expect(parseCampaignSpec(`${valid}round:\n  kind: dpo\n`, 'c.yaml').round).toEqual({ kind: 'dpo' });
    const warm = parseCampaignSpec(`${grpo}rounds:\n  startFrom: { checkpointId: ckpt-sft-1 }\n`, 'c.yaml');
    expect(warm.rounds.startFrom).toEqual({ checkpointId: 'ckpt-sft-1', loadOptimizer: false });
    expect(parseCampaignSpec(`${valid}  every: 10\n  earlyStop: {}\n`, 'c.yaml').evaluation).toMatchObject({
      every: 10,
      earlyStop: { patience: 3, minDelta: 0, on: 'loss' },
    });
    const evaluationLess = valid.replace(/evaluation:\n {2}scorer: exact\n/, '');
    expect(parseCampaignSpec(evaluationLess, 'c.yaml').evaluation.scorer).toBe('exact');
  });

  test.each([
    ['grpo without rewards configured', `${valid}round:\n  kind: grpo\n`, 19, 'round.grpo', /required when round.kind is grpo/],
    [
      'an environment of unknown kind',
      grpo.replace('    reward:\n      kind: numeric\n', '    environment:\n      kind: openenv\n      name: chess\n'),
      24,
      'round.grpo.environment.kind',
      /verifiers|python/,
    ],
    ['a grpo reward of unknown kind', grpo.replace('kind: numeric', 'kind: vibes'), 24, 'round.grpo.reward.kind', /exact|numeric/],
    ['grpo sampling greedily', grpo.replace('temperature: 1', 'temperature: 0'), 16, 'sampling.temperature', /above 0/],
    [
      'a KL penalty without reference logprobs',
      `${grpo}    loss:\n      beta: 0.05\n`,
      26,
      'round.grpo.loss.beta',
      /no reference logprobs.*reference: start/,
    ],
    [
      'the grpo loss on Baseten',
      grpo.replace('kind: local', 'kind: baseten'),
      22,
      'round.grpo.loss.type',
      /Baseten Loops has no grpo loss/,
    ],
    [
      'a reference session on Baseten (it would replace the policy in the run)',
      `${grpo.replace('kind: local', 'kind: baseten')}    reference: start\n    loss:\n      type: ppo\n`,
      25,
      'round.grpo.reference',
      /not available on Baseten Loops: a run is one session/,
    ],
    [
      'unclipped importance sampling off-policy',
      `${grpo}    maxStepsOffPolicy: 2\n    loss:\n      type: importance_sampling\n`,
      27,
      'round.grpo.loss.type',
      /importance_sampling is unclipped, and round.grpo.maxStepsOffPolicy is 2: .*use ppo/,
    ],
    [
      'both a reward and an environment',
      `${grpo}    environment:\n      kind: verifiers\n      name: vf_wordle\n      taskQueue: py\n`,
      24,
      'round.grpo.reward',
      /not used with round.grpo.environment/,
    ],
    ['dpo on Baseten', `${valid.replace('kind: local', 'kind: baseten')}round:\n  kind: dpo\n`, 19, 'round.kind', /custom loss/],
    ['dpo settings on an sft round', `${valid}round:\n  dpo:\n    beta: 0.1\n`, 20, 'round.dpo', /only used when round.kind is dpo/],
    ['a non-positive dpo beta', `${valid}round:\n  kind: dpo\n  dpo:\n    beta: 0\n`, 21, 'round.dpo.beta', /Too small|>0/i],
    ['sampled evaluations without evaluation.every', `${valid}  sampleEvery: 2\n`, 18, 'evaluation.sampleEvery', /needs evaluation.every/],
    [
      'early stopping without evaluation.every',
      `${valid}  earlyStop: { patience: 2 }\n`,
      18,
      'evaluation.earlyStop',
      /needs evaluation.every/,
    ],
    [
      'early stopping on the metric without sampled evaluations',
      `${valid}  every: 10\n  earlyStop: { on: metric }\n`,
      19,
      'evaluation.earlyStop.on',
      /needs evaluation.sampleEvery/,
    ],
    [
      'sampled evaluations on a dpo round',
      `${valid}  every: 10\n  sampleEvery: 2\nround:\n  kind: dpo\n`,
      19,
      'evaluation.sampleEvery',
      /a dpo round has none/,
    ],
    ...(() => {
      const baseten = (block: string) =>
        valid
          .replace('kind: local', 'kind: baseten')
          .replace('  model: roundhouse/tiny-chat\n', `  model: roundhouse/tiny-chat\n  baseten:\n${block}`);
      const tinker = valid.replace('kind: local', 'kind: tinker');
      return [
        [
          'a Baseten scale-down delay over an hour',
          baseten('    scaleDownDelaySeconds: 3601\n'),
          6,
          'provider.baseten.scaleDownDelaySeconds',
          /3600/,
        ],
        ['a Baseten scale-down delay of 0', baseten('    scaleDownDelaySeconds: 0\n'), 6, 'provider.baseten.scaleDownDelaySeconds', /1/],
        [
          'an unknown Baseten availability model',
          baseten('    availabilityModel: cheap\n'),
          6,
          'provider.baseten.availabilityModel',
          /dedicated|spot/,
        ],
        ['Baseten replicas of 0', baseten('    replicas: 0\n'), 6, 'provider.baseten.replicas', /1/],
        [
          'a Baseten reuse with more than one replica',
          baseten('    replicas: 2\n    reuseFromRunId: abc1234\n'),
          7,
          'provider.baseten.reuseFromRunId',
          /more than one replica always starts new deployments/,
        ],
        [
          'Baseten run settings on another provider',
          valid.replace('  model: roundhouse/tiny-chat\n', '  model: roundhouse/tiny-chat\n  baseten:\n    replicas: 1\n'),
          6,
          'provider.baseten',
          /is for kind baseten/,
        ],
        [
          'a Tinker checkpoint TTL under an hour',
          `${tinker}retention:\n  ttl: 60\n`,
          19,
          'retention.ttl',
          /minimum checkpoint TTL of 3600 s/,
        ],
        [
          'a Tinker checkpoint TTL of 30 minutes',
          `${tinker}retention:\n  ttl: 30m\n`,
          19,
          'retention.ttl',
          /minimum checkpoint TTL of 3600 s/,
        ],
        ['a checkpoint TTL on a provider without one', `${valid}retention:\n  ttl: 2h\n`, 19, 'retention.ttl', /takes none/],
      ] as [string, string, number, string, RegExp][];
    })(),
  ])('%s is refused with file, line and field', (_what, text, line, field, problem) => {
    const err = specError(text);
    expect({ field: err.field, line: err.line }).toEqual({ field, line });
    expect(err.message).toMatch(problem);
  });

  test("Baseten's run settings get the service's defaults; a Tinker TTL is seconds, or a duration in seconds", () => {
    const baseten = parseCampaignSpec(
      valid
        .replace('kind: local', 'kind: baseten')
        .replace('  model: roundhouse/tiny-chat\n', '  model: roundhouse/tiny-chat\n  baseten:\n    availabilityModel: spot\n'),
      'campaign.yaml',
    );
    expect(baseten.provider.baseten).toEqual({ availabilityModel: 'spot', replicas: 1, scaleDownDelaySeconds: 900 });
    const tinker = valid.replace('kind: local', 'kind: tinker');
    expect(parseCampaignSpec(`${tinker}retention:\n  ttl: 30d\n`, 'campaign.yaml').retention?.ttl).toBe(30 * 86_400);
    expect(parseCampaignSpec(`${tinker}retention:\n  ttl: 3600\n`, 'campaign.yaml').retention?.ttl).toBe(3600);
    expect(parseCampaignSpec(tinker, 'campaign.yaml').retention).toBeUndefined(); // no TTL: checkpoints never expire
  });

  test('broken YAML names the line', () => {
    const err = specError('name: x\nprovider: [unclosed\n');
    expect(err.message).toMatch(/^campaign\.yaml:\d+: not valid YAML or JSON/);
  });

  test('a missing spec file says so', () => {
    expect(() => loadCampaignSpec(path.join(os.tmpdir(), 'nope', 'campaign.yaml'))).toThrow(/campaign\.yaml: no such file/);
  });

  test('a spec file on disk loads', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-spec-')), 'c.yaml');
    fs.writeFileSync(file, valid);
    expect(loadCampaignSpec(file).name).toBe('tickets');
  });
});

describe('staged campaign spec', () => {
  // Stage 1 inherits every block; stage 2 sets its own data, training, sampling and round, and inherits evaluation.
  const staged = `${valid}stages:
  - name: warmup
    gate: { metric: accuracy, atLeast: 0.5 }
  - name: rl
    data: { train: rl/train.jsonl, eval: rl/eval.jsonl }
    training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64 }
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { reward: { kind: numeric } } }
    loadOptimizer: true
`;
  /** The 1-based line of the first line of `text` containing `needle`. */
  const lineOf = (text: string, needle: string) => text.split('\n').findIndex((l) => l.includes(needle)) + 1;

  test("each stage has its own blocks or the campaign's, and the top-level blocks are the first stage's", () => {
    const spec = parseCampaignSpec(staged, '/work/x/campaign.yaml');
    const [warmup, rl] = spec.stages!;
    expect(warmup).toEqual({
      name: 'warmup',
      data: spec.data,
      training: spec.training,
      sampling: spec.sampling,
      evaluation: spec.evaluation,
      round: { kind: 'sft' },
      rounds: spec.rounds,
      gate: { metric: 'accuracy', atLeast: 0.5 },
      loadOptimizer: false,
    });
    expect(warmup!.training).toMatchObject({ epochs: 2, batchSize: 8 });
    expect(rl).toMatchObject({
      name: 'rl',
      training: { epochs: 1, batchSize: 4, learningRate: 0.002, segmentSteps: 1000 },
      sampling: { maxTokens: 3, temperature: 1 },
      evaluation: { scorer: 'exact' },
      round: { kind: 'grpo', grpo: { groupSize: 4, reward: { kind: 'numeric' } } },
      rounds: { max: 1 },
      loadOptimizer: true,
    });
    expect(rl).not.toHaveProperty('gate');
  });

  test("each stage's data paths resolve against the spec file", () => {
    const spec = parseCampaignSpec(staged, '/work/x/campaign.yaml');
    expect(spec.stages!.map((s) => s.data)).toEqual([
      { train: '/work/x/data/train.jsonl', eval: '/work/x/data/eval.jsonl', reread: false },
      { train: '/work/x/rl/train.jsonl', eval: '/work/x/rl/eval.jsonl', reread: false },
    ]);
    const relative = parseCampaignSpec(staged, 'pipelines/campaign.yaml');
    expect(relative.stages![1]!.data.train).toBe(path.resolve('pipelines/rl/train.jsonl'));
  });

  test("a spec without stages parses as it did before stages: no stages key, the same as a one-stage spec's campaign", () => {
    const plain = parseCampaignSpec(valid, '/work/x/campaign.yaml');
    expect(plain).not.toHaveProperty('stages');
    const { stages, ...oneStage } = parseCampaignSpec(`${valid}stages:\n  - name: only\n`, '/work/x/campaign.yaml');
    expect(oneStage).toEqual(plain);
    expect(stages).toHaveLength(1);
  });

  test("a bad field in stage 2 is refused naming the stage's field and its line", () => {
    const text = staged.replace('epochs: 1,', 'epochs: 0,');
    const err = specError(text);
    expect({ field: err.field, line: err.line }).toEqual({ field: 'stages.1.training.epochs', line: lineOf(text, 'epochs: 0') });
    expect(err.message).toMatch(new RegExp(`^campaign\\.yaml:${err.line} stages\\.1\\.training\\.epochs: .*>=1`));
  });

  test.each([
    [
      'a provider in a stage',
      staged.replace('  - name: rl\n', '  - name: rl\n    provider: { kind: local, model: roundhouse/tiny-chat }\n'),
      'stages.1.provider',
      'provider: {',
      /is the campaign's, not a stage's: every stage uses the campaign's provider, budget/,
    ],
    [
      'a budget in a stage',
      staged.replace('  - name: warmup\n', '  - name: warmup\n    budget: { maxGpuMinutes: 5 }\n'),
      'stages.0.budget',
      'budget:',
      /is the campaign's, not a stage's/,
    ],
    [
      "a gate on a metric the stage's round kind does not measure",
      staged.replace('metric: accuracy', 'metric: meanReward'),
      'stages.0.gate.metric',
      'meanReward',
      /meanReward is not measured by an sft round; for sft: accuracy, evalLoss$/,
    ],
    [
      'a gate with both bounds',
      staged.replace('atLeast: 0.5', 'atLeast: 0.5, atMost: 0.9'),
      'stages.0.gate',
      'gate:',
      /needs exactly one bound/,
    ],
    ['a gate without a bound', staged.replace(', atLeast: 0.5', ''), 'stages.0.gate', 'gate:', /needs exactly one bound/],
    [
      'rounds.startFrom in stage 2',
      `${staged}    rounds: { startFrom: { checkpointId: ckpt-1 } }\n`,
      'stages.1.rounds.startFrom',
      'startFrom',
      /stage 2 \(rl\) starts from the previous stage's final training checkpoint: only the first stage may set rounds\.startFrom$/,
    ],
    [
      'a campaign rounds.startFrom that stage 2 inherits',
      staged.replace('stages:', 'rounds:\n  startFrom: { checkpointId: ckpt-1 }\nstages:'),
      'rounds.startFrom',
      'startFrom',
      /stage 2 \(rl\) inherits it with the campaign's rounds.*\(set it in stage 1's own rounds\)$/,
    ],
    [
      'two stages of one name',
      staged.replace('name: rl', 'name: warmup # again'),
      'stages.1.name',
      'warmup # again',
      /'warmup' names two stages: give each stage its own name/,
    ],
    [
      'two unnamed stages of one kind',
      `${valid}stages:\n  - gate: { metric: accuracy, atLeast: 0.5 }\n  - data: { train: b.jsonl, eval: c.jsonl }\n`,
      'stages.1.name',
      'data: { train: b',
      /'sft' names two stages \(a stage without a name is named after its round kind\)/,
    ],
    [
      'a campaign block that stage 2 inherits and its round kind refuses',
      staged.replace('maxTokens: 4\n', 'maxTokens: 4\n  temperature: 0\n').replace('    sampling: { maxTokens: 3, temperature: 1 }\n', ''),
      'sampling.temperature',
      'temperature: 0',
      /^campaign\.yaml:\d+ sampling\.temperature: must be above 0 for a grpo round.*\(in stage 2 \(rl\), which inherits the campaign's sampling\)$/,
    ],
    [
      'a stage without a block the campaign does not give',
      `${valid.replace(/training:\n( {2}.*\n)+/, '')}stages:
  - name: warmup
    training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 256 }
  - name: again
    data: { train: b.jsonl, eval: c.jsonl }
`,
      'stages.1.training',
      'name: again',
      /stages\.1\.training: is required \(stage 2 \(again\) sets no training and the campaign has none to inherit\)$/,
    ],
    [
      'an accuracy gate given as a percentage',
      staged.replace('atLeast: 0.5', 'atLeast: 60'),
      'stages.0.gate.atLeast',
      'atLeast: 60',
      /^campaign\.yaml:\d+ stages\.0\.gate\.atLeast: is a fraction: 0\.6 \(not 60%\)$/,
    ],
    [
      'an accuracy gate below 0',
      staged.replace('atLeast: 0.5', 'atLeast: -0.1'),
      'stages.0.gate.atLeast',
      'atLeast: -0.1',
      /is a fraction between 0 and 1 \(it is -0\.1\)$/,
    ],
    [
      'a preference-accuracy gate above 1',
      staged
        .replace(
          'round: { kind: grpo, grpo: { reward: { kind: numeric } } }',
          'round: { kind: dpo }\n    gate: { metric: preferenceAccuracy, atLeast: 150 }',
        )
        .replace('    sampling: { maxTokens: 3, temperature: 1 }\n', ''),
      'stages.1.gate.atLeast',
      'atLeast: 150',
      /is a fraction between 0 and 1 \(it is 150\)$/,
    ],
    [
      'an evalLoss gate with atLeast',
      staged.replace('metric: accuracy, atLeast: 0.5', 'metric: evalLoss, atLeast: 0.5'),
      'stages.0.gate.atLeast',
      'evalLoss',
      /evalLoss is lower when better: bound it with atMost$/,
    ],
    [
      'an accuracy gate with atMost',
      staged.replace('atLeast: 0.5', 'atMost: 0.5'),
      'stages.0.gate.atMost',
      'atMost: 0.5',
      /accuracy is higher when better: bound it with atLeast$/,
    ],
    [
      'an evalLoss gate at or below 0',
      staged.replace('metric: accuracy, atLeast: 0.5', 'metric: evalLoss, atMost: 0'),
      'stages.0.gate.atMost',
      'atMost: 0',
      /a loss is above 0: give a positive bound$/,
    ],
    [
      "a stage's accuracy target given as a percentage",
      staged.replace(
        '    loadOptimizer: true\n',
        '    loadOptimizer: true\n    rounds: { max: 2, target: { metric: accuracy, atLeast: 80 } }\n',
      ),
      'stages.1.rounds.target.atLeast',
      'atLeast: 80',
      /rounds\.target\.atLeast: is a fraction: 0\.8 \(not 80%\)$/,
    ],
    [
      'a misspelt block in a stage',
      staged.replace('    sampling: {', '    samplng: {'),
      'stages.1.samplng',
      'samplng',
      /is not a known field/,
    ],
  ])('%s is refused with file, line and field', (_what, text, field, lineWith, problem) => {
    const err = specError(text);
    expect({ field: err.field, line: err.line }).toEqual({ field, line: lineOf(text, lineWith) });
    expect(err.message).toMatch(problem);
  });

  test('gates within range parse: accuracy at its ends (0 and 1), evalLoss with atMost', () => {
    for (const gate of ['metric: accuracy, atLeast: 0', 'metric: accuracy, atLeast: 1', 'metric: evalLoss, atMost: 2.5']) {
      const spec = parseCampaignSpec(staged.replace('metric: accuracy, atLeast: 0.5', gate), '/work/x/campaign.yaml');
      expect(spec.stages![0]!.gate).toBeDefined();
    }
  });
});

describe('python functions in the spec', () => {
  const base = valid.replace('evaluation:\n  scorer: exact\n', '');
  const grpo = (reward: string) =>
    `${base}sampling: { maxTokens: 4, temperature: 1 }\nround: { kind: grpo, grpo: { reward: ${reward} } }\nevaluation: { scorer: exact }\n`.replace(
      'sampling:\n  maxTokens: 4\n',
      '',
    );

  test('a python reward, scorer and data policy parse with the call defaults filled in, and the checks list them', () => {
    const spec = parseCampaignSpec(
      grpo('{ kind: python, name: judge, taskQueue: rewards, retry: { maxAttempts: 3 } }')
        .replace('evaluation: { scorer: exact }', 'evaluation: { scorer: { kind: python, name: correct, taskQueue: rewards } }')
        .concat('rounds: { max: 2, nextData: { policy: python, name: hardest, taskQueue: policies, workerWaitSeconds: 5 } }\n'),
      'campaign.yaml',
    );
    expect(spec.round.grpo!.reward).toEqual({
      kind: 'python',
      name: 'judge',
      taskQueue: 'rewards',
      retry: { maxAttempts: 3, initialIntervalSeconds: 1, maxIntervalSeconds: 60, backoff: 2 },
      timeoutSeconds: 600,
      heartbeatTimeoutSeconds: 30,
      workerWaitSeconds: 120,
      concurrency: 8,
    });
    expect(pythonChecksOf(spec).map((c) => [c.field, c.role, c.call.name, c.call.taskQueue])).toEqual([
      ['round.grpo.reward', 'reward', 'judge', 'rewards'],
      ['evaluation.scorer', 'scorer', 'correct', 'rewards'],
    ]);
    expect(nextDataCall(spec.rounds.nextData)).toMatchObject({
      name: 'hardest',
      taskQueue: 'policies',
      workerWaitSeconds: 5,
      timeoutSeconds: 600,
    });
    // A built-in policy keeps exactly its fields (no python defaults leak into it).
    expect(parseCampaignSpec(valid, 'campaign.yaml').rounds.nextData).toEqual({ policy: 'mistakes', replayShare: 0.3 });
  });

  test('a python block missing its name or task queue, or python fields on a built-in policy, is named by field and line', () => {
    const noQueue = grpo('{ kind: python, name: judge }');
    expect(specError(noQueue).message).toMatch(/campaign\.yaml:\d+ round\.grpo\.reward\.taskQueue: /);
    const policy = `${valid}rounds: { max: 2, nextData: { policy: python, taskQueue: q } }\n`;
    expect(specError(policy).message).toMatch(/rounds\.nextData\.name: is required when policy is python/);
    const stray = `${valid}rounds: { max: 2, nextData: { policy: all, name: hardest } }\n`;
    expect(specError(stray).message).toMatch(/rounds\.nextData\.name: is only for policy: python/);
    const scorer = valid.replace('scorer: exact', 'scorer: { kind: python, name: s, taskQueue: q, concurrency: 0 }');
    expect(specError(scorer).message).toMatch(/evaluation\.scorer/);
  });
});

describe('what a campaign checks on its workers before its first round', () => {
  test("every stage's Python calls, labelled by stage: rewards, environments with their args, scorers, and a data policy only where a stage has a round after the first", () => {
    const spec = parseCampaignSpec(
      `${valid}stages:
  - name: warmup
    evaluation: { scorer: { kind: python, name: correct, taskQueue: scorers } }
    rounds: { max: 1, nextData: { policy: python, name: hardest, taskQueue: policies } }
  - name: rl
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { environment: { kind: verifiers, name: vf-game, taskQueue: envs, args: { turns: 2 } } } }
    rounds: { max: 2, nextData: { policy: python, name: hardest, taskQueue: policies } }
`,
      'campaign.yaml',
    );
    expect(campaignPythonChecks(spec).map((c) => [c.field, c.role, c.call.name, c.call.taskQueue, c.args])).toEqual([
      ['stage 1 (warmup): evaluation.scorer', 'scorer', 'correct', 'scorers', undefined],
      ['stage 2 (rl): round.grpo.environment', 'environment', 'verifiers:vf-game', 'envs', { turns: 2 }],
      ['stage 2 (rl): rounds.nextData', 'data_policy', 'hardest', 'policies', undefined],
    ]);
    // A campaign without stages: its own calls, unlabelled.
    const plain = parseCampaignSpec(valid.replace('scorer: exact', 'scorer: { kind: python, name: s, taskQueue: q }'), 'campaign.yaml');
    expect(campaignPythonChecks(plain).map((c) => c.field)).toEqual(['evaluation.scorer']);
  });

  test('the worker variables notify names: webhookEnv, and secretEnv only when the spec names it', () => {
    const withNotify = (notify: string) => parseCampaignSpec(`${valid}notify: ${notify}\n`, 'campaign.yaml');
    expect(workerVariablesOf(withNotify('{ webhook: "https://hooks.example/x" }'))).toEqual([]);
    expect(workerVariablesOf(withNotify('{ webhookEnv: HOOK_URL, secretEnv: HOOK_KEY }'))).toEqual([
      { field: 'notify.webhookEnv', name: 'HOOK_URL' },
      { field: 'notify.secretEnv', name: 'HOOK_KEY' },
    ]);
    expect(workerVariablesOf(parseCampaignSpec(valid, 'campaign.yaml'))).toEqual([]);
  });
});

describe('schedules and batches are pure functions of the step', () => {
  const schedule = { kind: 'cosine' as const, warmupSteps: 2, minRatio: 0.1 };
  test('warm-up rises linearly, cosine ends at the floor, and the same step always gives the same rate', () => {
    expect(learningRateAt(0, 10, 1, schedule)).toBeCloseTo(0.5);
    expect(learningRateAt(1, 10, 1, schedule)).toBeCloseTo(1);
    expect(learningRateAt(2, 10, 1, schedule)).toBeCloseTo(1);
    expect(learningRateAt(10, 10, 1, schedule)).toBeCloseTo(0.1);
    expect(learningRateAt(6, 10, 1, schedule)).toBe(learningRateAt(6, 10, 1, schedule));
    expect(learningRateAt(5, 10, 1, { kind: 'linear', warmupSteps: 0, minRatio: 0 })).toBeCloseTo(0.5);
    expect(learningRateAt(5, 10, 0.3, { kind: 'constant', warmupSteps: 0, minRatio: 0 })).toBe(0.3);
  });

  test('each epoch is a seeded permutation covering every row once', () => {
    expect(planSteps(20, 8, 2)).toEqual({ stepsPerEpoch: 3, totalSteps: 6 });
    const epoch0 = [0, 1, 2].flatMap((s) => batchRows(s, 20, 8, 7).rows);
    expect([...epoch0].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_v, i) => i));
    expect(batchRows(3, 20, 8, 7).epoch).toBe(1);
    expect(batchRows(3, 20, 8, 7).rows).not.toEqual(batchRows(0, 20, 8, 7).rows);
    expect(batchRows(4, 20, 8, 7)).toEqual(batchRows(4, 20, 8, 7));
  });
});

describe('early stopping is a pure function of the evaluation curve', () => {
  const curve = (losses: number[], metrics: (number | undefined)[] = []) =>
    losses.map((loss, i) => ({ step: (i + 1) * 10, loss, metric: metrics[i] }));
  test('the best is the lowest loss; patience counts the evaluations since it; minDelta ignores small gains', () => {
    const rule = { patience: 2, minDelta: 0, on: 'loss' as const };
    expect(earlyStopState(curve([3, 2, 2.5]), rule)).toMatchObject({ best: 20, sinceBest: 1, stop: false, improved: false });
    expect(earlyStopState(curve([3, 2, 2.5, 2.1]), rule)).toMatchObject({ best: 20, bestValue: 2, sinceBest: 2, stop: true });
    expect(earlyStopState(curve([3, 2, 2.5, 1.9]), rule)).toMatchObject({ best: 40, sinceBest: 0, stop: false, improved: true });
    expect(earlyStopState(curve([3, 2, 1.95, 1.94]), { ...rule, minDelta: 0.1 })).toMatchObject({ best: 20, stop: true });
  });
  test('on the metric, higher is better and unsampled passes do not count', () => {
    const rule = { patience: 2, minDelta: 0, on: 'metric' as const };
    const points = curve([3, 2, 1, 0.5, 0.4], [0.2, undefined, 0.5, undefined, 0.4]);
    expect(earlyStopState(points, rule)).toMatchObject({ best: 30, bestValue: 0.5, sinceBest: 1, stop: false });
    expect(earlyStopState([...points, { step: 60, loss: 0.3, metric: 0.5 }], rule)).toMatchObject({ best: 30, stop: true });
  });
});

describe('promotion in a staged campaign (the last stage puts its best round forward)', () => {
  const stages = (last: string) => `${valid}promotion: { line: tickets, on: test }
stages:
  - name: sft
  - name: last
${last}`;
  const grpo = `    data: { train: rl/train.jsonl, eval: rl/eval.jsonl, test: rl/test.jsonl }
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { reward: { kind: numeric } } }
`;
  const lineOf = (text: string, needle: string) => text.split('\n').findIndex((l) => l.includes(needle)) + 1;

  test('only the last stage needs what promotion compares on: stage 1 without a test set is fine', () => {
    const spec = parseCampaignSpec(stages(grpo), '/work/x/campaign.yaml');
    expect(spec.promotion).toMatchObject({ line: 'tickets', on: 'test' });
    expect(spec.stages!.at(-1)!.data.test).toBe('/work/x/rl/test.jsonl');
  });

  test.each([
    [
      'a last stage without the test set promotion compares on',
      stages(grpo.replace(', test: rl/test.jsonl', '')),
      'promotion.on',
      'promotion:',
      /promotion\.on: is test, but the campaign has no data\.test.*\(in stage 2 \(last\), which inherits the campaign's promotion\)$/,
    ],
    [
      'a last stage of dpo (its accuracy is preference accuracy, not a sampled answer’s)',
      stages(`    data: { train: pairs.train.jsonl, eval: pairs.eval.jsonl, test: test.jsonl }
    round: { kind: dpo }
`),
      'promotion',
      'promotion:',
      /promotion: compares sampled-answer accuracy .*a staged campaign puts its last stage's best round forward: end it with an sft or grpo stage/,
    ],
  ])('%s is refused before anything runs, naming the field', (_what, text, field, lineWith, problem) => {
    const err = specError(text);
    expect({ field: err.field, line: err.line }).toEqual({ field, line: lineOf(text, lineWith) });
    expect(err.message).toMatch(problem);
  });
});

import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import { specError, validSpec as valid } from '../helpers/spec-text';

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

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCampaignSpec, parseCampaignSpec } from '../../config/io/spec';
import { specError, validSpec as valid } from '../helpers/spec-text';

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

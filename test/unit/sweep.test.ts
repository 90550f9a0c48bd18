import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import { armsOf, rungDecision, withAssignment } from '../../config/rules/sweep';

// A sweep's arms and its rung decisions (config/rules/sweep.ts), and the spec's checks of `sweep` (config/io/spec-sweep.ts).

test('a grid is every combination, in the order written; random draws are seeded and within their ranges', () => {
  expect(armsOf({ 'training.learningRate': [1, 2], 'training.loraRank': [8, 16] }, undefined, 0).map((a) => a.assign)).toEqual([
    { 'training.learningRate': 1, 'training.loraRank': 8 },
    { 'training.learningRate': 1, 'training.loraRank': 16 },
    { 'training.learningRate': 2, 'training.loraRank': 8 },
    { 'training.learningRate': 2, 'training.loraRank': 16 },
  ]);
  const over = { 'training.learningRate': { logUniform: [1e-5, 1e-2] as [number, number] }, 'training.loraRank': [8, 16, 32] };
  const a = armsOf(over, 6, 42);
  expect(armsOf(over, 6, 42)).toEqual(a); // the same seed, the same arms
  expect(armsOf(over, 6, 43)).not.toEqual(a);
  for (const arm of a) {
    const lr = arm.assign['training.learningRate'] as number;
    expect(lr).toBeGreaterThanOrEqual(1e-5);
    expect(lr).toBeLessThanOrEqual(1e-2);
    expect([8, 16, 32]).toContain(arm.assign['training.loraRank']);
  }
});

test('successive halving keeps the best ⌈n/η⌉: lower loss or higher accuracy; ties to the lower arm; no figure ranks last', () => {
  const figures = [
    { arm: 1, value: 0.5 },
    { arm: 2, value: 0.2 },
    { arm: 3, value: Number.NaN },
    { arm: 4, value: 0.2 },
    { arm: 5, value: 0.9 },
  ];
  expect(rungDecision(figures, 'eval_loss', 2)).toEqual({ kept: [1, 2, 4], stopped: [3, 5] });
  expect(rungDecision(figures, 'accuracy', 2)).toEqual({ kept: [1, 2, 5], stopped: [3, 4] });
  expect(rungDecision(figures, 'eval_loss', 4)).toEqual({ kept: [2, 4], stopped: [1, 3, 5] });
  expect(rungDecision([{ arm: 7, value: 1 }], 'eval_loss', 2)).toEqual({ kept: [7], stopped: [] });
});

test('an arm is the spec with its fields set, deep-copied', () => {
  const spec = { training: { learningRate: 1, epochs: 2 }, round: { kind: 'grpo', grpo: { groupSize: 4 } } };
  const arm = withAssignment(spec, { 'training.learningRate': 3, 'round.grpo.groupSize': 8 });
  expect(arm).toEqual({ training: { learningRate: 3, epochs: 2 }, round: { kind: 'grpo', grpo: { groupSize: 8 } } });
  expect(spec.training.learningRate).toBe(1);
});

describe('the spec', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-sweep-spec-'));
  const file = path.join(dir, 'campaign.yaml');
  const base = `name: s
provider: { kind: local, model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.001, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3 }
`;
  const parse = (extra: string) => parseCampaignSpec(base + extra, file);

  test('a grid gives its arms; a distribution needs samples', () => {
    const spec = parse('sweep: { over: { training.learningRate: [0.001, 0.01] }, select: { rungs: 4 } }');
    expect(spec.sweep!.arms).toEqual([
      { arm: 1, assign: { 'training.learningRate': 0.001 } },
      { arm: 2, assign: { 'training.learningRate': 0.01 } },
    ]);
    expect(spec.sweep!.select).toEqual({ metric: 'eval_loss', rungs: 4, eta: 2 });
    expect(() => parse('sweep: { over: { training.learningRate: { logUniform: [0.0001, 0.01] } }, select: { rungs: 4 } }')).toThrow(
      /campaign\.yaml:\d+ sweep\.samples: is required with a distribution \(training\.learningRate\)/,
    );
    expect(() => parse('sweep: { over: { training.learningRate: [0.001] }, select: { rungs: 4 } }')).toThrow(/sweep\.over: gives one arm/);
    expect(() => parse('sweep: { over: { provider.model: [a, b] }, select: { rungs: 4 } }')).toThrow(
      /sweep\.over\.provider\.model: is not a field an arm may set/,
    );
  });

  test('every arm is checked as a whole spec, and a refused value names its arm', () => {
    expect(() => parse('sweep: { over: { training.learningRate: [0.001, -1] }, select: { rungs: 4 } }')).toThrow(
      /campaign\.yaml:\d+ sweep\.over\.training\.learningRate: arm 2 \(training\.learningRate=-1\): training\.learningRate: /,
    );
    expect(() =>
      parse('sweep: { over: { training.learningRate: [0.001, 0.01] }, select: { rungs: 4 } }\nevaluation: { scorer: exact, every: 3 }'),
    ).toThrow(/evaluation\.every: is the sweep's rung \(sweep\.select\.rungs: 4\)/);
  });

  test('not with stages yet', () => {
    expect(() =>
      parse(`sweep: { over: { training.learningRate: [0.001, 0.01] }, select: { rungs: 4 } }
evaluation: { scorer: exact }
stages:
  - { name: a }
`),
    ).toThrow(/sweep: is not yet available with stages/);
  });
});

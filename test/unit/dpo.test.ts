import { dpoLossAndGradients, type DpoPair } from '../../activities/dpo-loss';

const pair = (chosen: number[], rejected: number[], refChosen = 0, refRejected = 0): DpoPair => ({
  chosen: { logprobs: chosen, weights: chosen.map((_v, i) => (i === 0 ? 0 : 1)), referenceLogprob: refChosen },
  rejected: { logprobs: rejected, weights: rejected.map((_v, i) => (i === 0 ? 0 : 1)), referenceLogprob: refRejected },
});

test('DPO loss is −log σ(β·margin) and its per-token gradients match finite differences', () => {
  const p = pair([-9, -1, -2], [-9, -0.5, -0.7], -3.5, -1.0);
  const beta = 0.5;
  const { loss, chosen, rejected } = dpoLossAndGradients(p, beta);
  // margin = (−3 − (−3.5)) − (−1.2 − (−1.0)) = 0.5 + 0.2 = 0.7
  expect(loss).toBeCloseTo(-Math.log(1 / (1 + Math.exp(-beta * 0.7))), 10);
  const h = 1e-6;
  for (const [side, grads] of [
    ['chosen', chosen],
    ['rejected', rejected],
  ] as const) {
    grads.forEach((g, i) => {
      const bumped = structuredClone(p);
      bumped[side].logprobs[i]! += h;
      const numeric = (dpoLossAndGradients(bumped, beta).loss - loss) / h;
      expect(g).toBeCloseTo(i === 0 ? 0 : numeric, 5); // prompt tokens carry no gradient
    });
  }
  expect(chosen[1]!).toBeLessThan(0); // raising the chosen completion lowers the loss
  expect(rejected[1]!).toBeGreaterThan(0);
});

test('a pair the policy already prefers strongly has a small loss and small gradients', () => {
  const strong = dpoLossAndGradients(pair([0, -0.1], [0, -9]), 1);
  const weak = dpoLossAndGradients(pair([0, -9], [0, -0.1]), 1);
  expect(strong.loss).toBeLessThan(0.01);
  expect(weak.loss).toBeGreaterThan(8);
  expect(Math.abs(strong.chosen[1]!)).toBeLessThan(Math.abs(weak.chosen[1]!));
});

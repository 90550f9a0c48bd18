/**
 * DPO through a custom loss: the trainer gives per-token logprobs (forward), the caller computes the DPO loss and
 * its gradient with respect to each token's logprob, and sends those gradients (custom_forward_backward).
 *
 *   z = β · ((π_chosen − ref_chosen) − (π_rejected − ref_rejected)),   L = −log σ(z)
 *   ∂L/∂π_chosen = −β·σ(−z),   ∂L/∂π_rejected = +β·σ(−z)
 * where π is the summed logprob of a completion's trained tokens; every trained token of a completion gets its
 * completion's derivative (π is a sum), prompt tokens get 0.
 */
export interface DpoPair {
  /** Per-token logprobs of the chosen / rejected sequences under the policy, and the trained-token weights. */
  chosen: { logprobs: number[]; weights: number[]; referenceLogprob: number };
  rejected: { logprobs: number[]; weights: number[]; referenceLogprob: number };
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const logSigmoid = (x: number) => (x >= 0 ? -Math.log1p(Math.exp(-x)) : x - Math.log1p(Math.exp(x)));

function summed(logprobs: number[], weights: number[]): number {
  return logprobs.reduce((a, lp, i) => a + (weights[i] ? lp * weights[i]! : 0), 0);
}

export function dpoLossAndGradients(pair: DpoPair, beta: number): { loss: number; margin: number; chosen: number[]; rejected: number[] } {
  const pc = summed(pair.chosen.logprobs, pair.chosen.weights);
  const pr = summed(pair.rejected.logprobs, pair.rejected.weights);
  const z = beta * (pc - pair.chosen.referenceLogprob - (pr - pair.rejected.referenceLogprob));
  const g = beta * sigmoid(-z);
  return {
    loss: -logSigmoid(z),
    margin: z / beta,
    chosen: pair.chosen.weights.map((w) => (w ? -g * w : 0)),
    rejected: pair.rejected.weights.map((w) => (w ? g * w : 0)),
  };
}

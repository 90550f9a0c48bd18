// Pure (no Temporal, no Node): token counts as a per-token biller (Tinker) charges them, shared by the activities that
// count them and the round workflow that sums and prices them.

/** Tokens processed: prompts and forward-only passes are prefill, generated tokens sample, forward-backward passes train. */
export interface TokenUsage {
  prefill: number;
  sample: number;
  train: number;
  /**
   * With a dollar budget: the generated tokens the samples were admitted on (their bound, `n × maxTokens` per prompt),
   * beside `sample`, what they generated. The difference is the estimate's error.
   */
  sampleBound?: number;
}

export function emptyUsage(): TokenUsage {
  return { prefill: 0, sample: 0, train: 0 };
}

export function addUsage(a: TokenUsage | undefined, b: TokenUsage | undefined): TokenUsage | undefined {
  if (!a) return b && { ...b };
  if (!b) return a;
  const bound =
    a.sampleBound === undefined && b.sampleBound === undefined
      ? {}
      : { sampleBound: (a.sampleBound ?? a.sample) + (b.sampleBound ?? b.sample) };
  return { prefill: a.prefill + b.prefill, sample: a.sample + b.sample, train: a.train + b.train, ...bound };
}

/** What tokens cost at prices in USD per million tokens. */
export function tokenCostUsd(u: TokenUsage, prices: TokenUsage): number {
  return (u.prefill * prices.prefill + u.sample * prices.sample + u.train * prices.train) / 1_000_000;
}

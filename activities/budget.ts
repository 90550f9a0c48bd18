import { RoundhouseFailure } from '../config/rules/failures';
import { MIN_BILLED_MS, heldUsd, isPricingProblem, roundPricing, tokensUsd, type RoundPricing } from '../config/rules/prices';
import type { RoundBudget, RoundSpec } from '../workflows/round/contract';

/**
 * A round's dollar budget before anything is provisioned (docs/design/budget.md): its pricing, or a refusal naming the
 * field that would price it; and a refusal when even the cheapest round costs more than what the budget leaves.
 */

/** Tokens of a prepared row of any shape: its prompt and what it trains on (answer, chosen and rejected, completions). */
function rowTokens(row: object): { prompt: number; all: number } {
  const r = row as {
    promptTokens?: number[];
    completionTokens?: number[];
    chosenTokens?: number[];
    rejectedTokens?: number[];
    completions?: { tokens: number[] }[];
  };
  const prompt = r.promptTokens?.length ?? 0;
  const rest =
    (r.completionTokens?.length ?? 0) +
    (r.chosenTokens?.length ?? 0) +
    (r.rejectedTokens?.length ?? 0) +
    (r.completions ?? []).reduce((a, c) => a + c.tokens.length, 0);
  return { prompt, all: prompt + rest };
}

/**
 * The least a round can cost: for GPU time, the least the provider bills of the resource (a minute on Together and
 * Baseten); for tokens, one step's rows (the `batchSize` shortest prompts, trained) and the eval set's prompts read twice
 * (the baseline and the final evaluation). A lower bound: a refusal on it is never wrong.
 */
export function minimumRoundUsd(pricing: RoundPricing, spec: RoundSpec, data: { train: object[]; eval: object[] }): number {
  if (pricing.billing === 'gpu-time') return heldUsd(pricing, MIN_BILLED_MS[spec.provider.kind]);
  const shortest = data.train
    .map((r) => rowTokens(r).prompt)
    .sort((a, b) => a - b)
    .slice(0, Math.max(1, spec.training.batchSize));
  const evalPrompts = data.eval.reduce((a, r) => a + rowTokens(r).prompt, 0);
  return tokensUsd(pricing, { prefill: 2 * evalPrompts, sample: 0, train: shortest.reduce((a, t) => a + t, 0) });
}

/** The round's pricing under a dollar budget, checked against its cheapest run; no budget, no pricing asked for. */
export function budgetPricing(options: {
  spec: RoundSpec;
  budget: RoundBudget | undefined;
  gpuCount: number;
  quotePerHour: number | undefined;
  data: { train: object[]; eval: object[] };
}): RoundPricing | undefined {
  const { spec, budget } = options;
  if (budget?.maxUsd === undefined) return undefined;
  const pricing = roundPricing({
    dialect: spec.provider.kind,
    model: spec.provider.model,
    gpuCount: options.gpuCount,
    prices: budget.prices,
    providerTokenPrices: spec.provider.tokenPrices,
    quotePerHour: options.quotePerHour,
  });
  if (isPricingProblem(pricing))
    throw new RoundhouseFailure('InvalidInput', `${pricing.field}: budget.maxUsd cannot be enforced: ${pricing.message}`);
  const least = minimumRoundUsd(pricing, spec, options.data);
  if (least > budget.maxUsd) {
    const increment = MIN_BILLED_MS[spec.provider.kind] / 1000;
    const what =
      pricing.billing === 'gpu-time'
        ? `the least billed, ${increment} s at $${pricing.perHour.toFixed(2)}/h`
        : 'one step and the eval set read twice';
    throw new RoundhouseFailure(
      'InvalidInput',
      `budget.maxUsd: $${budget.maxUsd} left is below the cheapest round of ${spec.provider.model} ($${least.toFixed(4)}: ${what}); nothing was provisioned`,
    );
  }
  return pricing;
}

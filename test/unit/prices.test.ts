import { RoundhouseFailure } from '../../config/rules/failures';
import { isPricingProblem, roundPricing, TINKER_LIST_PRICES } from '../../config/rules/prices';
import { budgetPricing, minimumRoundUsd } from '../../activities/budget';
import type { RoundSpec } from '../../workflows/round/contract';

// Pricing a dollar budget (docs/design/budget.md): the spec's rates first, then the dialect's documented default; a
// budget nothing prices is refused, naming the field that would.

test('GPU time: the spec’s rate per GPU-hour times the GPUs, else the provider’s quote; neither is a refusal naming budget.prices.gpuHour', () => {
  expect(roundPricing({ dialect: 'together', model: 'm', gpuCount: 8, prices: { gpuHour: 3 }, quotePerHour: 99 })).toEqual({
    billing: 'gpu-time',
    perHour: 24,
    source: 'spec',
  });
  expect(roundPricing({ dialect: 'local', model: 'm', gpuCount: 1, quotePerHour: 2.5 })).toEqual({
    billing: 'gpu-time',
    perHour: 2.5,
    source: 'quote',
  });
  const baseten = roundPricing({ dialect: 'baseten', model: 'Qwen/Qwen3-8B', gpuCount: 1 });
  expect(isPricingProblem(baseten) && baseten.field).toBe('budget.prices.gpuHour');
  expect(isPricingProblem(baseten) && baseten.message).toMatch(
    /^Baseten Loops bills GPU time and gave no price for Qwen\/Qwen3-8B \(default: none: Baseten bills per minute/,
  );
});

test('tokens: budget.prices.tokens, then provider.tokenPrices, then Tinker’s list; an unlisted model is a refusal naming budget.prices.tokens', () => {
  const spec = { prefill: 1, sample: 2, train: 3 };
  expect(
    roundPricing({
      dialect: 'tinker',
      model: 'x',
      gpuCount: 1,
      prices: { tokens: spec },
      providerTokenPrices: TINKER_LIST_PRICES['Qwen/Qwen3-8B'],
    }),
  ).toEqual({
    billing: 'tokens',
    tokens: spec,
    source: 'spec',
  });
  expect(roundPricing({ dialect: 'tinker', model: 'Qwen/Qwen3-8B', gpuCount: 1 })).toEqual({
    billing: 'tokens',
    tokens: { prefill: 0.13, sample: 0.4, train: 0.4 },
    source: 'list',
  });
  const unlisted = roundPricing({ dialect: 'tinker', model: 'roundhouse/tiny-chat', gpuCount: 1 });
  expect(isPricingProblem(unlisted) && unlisted.field).toBe('budget.prices.tokens');
});

const roundSpec = (kind: 'tinker' | 'together', model: string) =>
  ({ provider: { kind, model }, training: { batchSize: 2 } }) as unknown as RoundSpec;
const rows = (...prompts: number[]) => prompts.map((n) => ({ promptTokens: new Array<number>(n).fill(1), completionTokens: [1, 2] }));

test('the cheapest round: the least billed GPU time (a minute on Together); for tokens, the shortest prompts of one step trained and the eval prompts read twice', () => {
  const gpu = { billing: 'gpu-time' as const, perHour: 60, source: 'quote' as const };
  expect(minimumRoundUsd(gpu, roundSpec('together', 'm'), { train: rows(5), eval: rows(5) })).toBeCloseTo(1, 12);
  const tokens = { billing: 'tokens' as const, tokens: { prefill: 1_000_000, sample: 0, train: 2_000_000 }, source: 'spec' as const };
  // train: the two shortest prompts (3 + 4 tokens) at $2 each; prefill: eval prompts (10 + 20) twice at $1 each.
  expect(minimumRoundUsd(tokens, roundSpec('tinker', 'm'), { train: rows(9, 3, 4), eval: rows(10, 20) })).toBeCloseTo(14 + 60, 9);
});

test('a budget that cannot be priced, or is below the cheapest round, is refused as InvalidInput before provisioning', () => {
  const data = { train: rows(5, 5), eval: rows(5) };
  const refusal = (f: () => unknown) => {
    try {
      f();
    } catch (err) {
      return err;
    }
    throw new Error('not refused');
  };
  const unpriced = refusal(() =>
    budgetPricing({ spec: roundSpec('tinker', 'unlisted/model'), budget: { maxUsd: 5 }, gpuCount: 1, quotePerHour: undefined, data }),
  );
  expect(unpriced).toBeInstanceOf(RoundhouseFailure);
  expect((unpriced as RoundhouseFailure).type).toBe('InvalidInput');
  expect((unpriced as Error).message).toMatch(/^budget\.prices\.tokens: budget\.maxUsd cannot be enforced: Tinker bills tokens/);
  const tooSmall = refusal(() =>
    budgetPricing({ spec: roundSpec('together', 'm'), budget: { maxUsd: 0.5 }, gpuCount: 1, quotePerHour: 60, data }),
  );
  expect((tooSmall as Error).message).toBe(
    'budget.maxUsd: $0.5 left is below the cheapest round of m ($1.0000: the least billed, 60 s at $60.00/h); nothing was provisioned',
  );
  expect(budgetPricing({ spec: roundSpec('together', 'm'), budget: { maxUsd: 2 }, gpuCount: 1, quotePerHour: 60, data })).toEqual({
    billing: 'gpu-time',
    perHour: 60,
    source: 'quote',
  });
  expect(budgetPricing({ spec: roundSpec('together', 'm'), budget: {}, gpuCount: 1, quotePerHour: undefined, data })).toBeUndefined();
});

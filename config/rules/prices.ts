// Pure (no Temporal, no Node): what a round's work costs in dollars, per dialect, and where each default comes from
// (docs/design/budget.md). The spec's `budget.prices` overrides the defaults with negotiated rates.
import { abilitiesOf, type Dialect } from './dialects';
import { tokenCostUsd, type TokenUsage } from './usage';

/** USD per million tokens: prefill (prompts, forward-only passes), sample (generated), train (forward-backward). */
export type TokenPrices = TokenUsage;

/** `budget.prices`: negotiated rates. */
export interface PriceOverrides {
  /** USD per GPU-hour (a resource of N GPUs costs N times it), for a dialect that bills GPU time. */
  gpuHour?: number;
  /** USD per million tokens, for a dialect that bills tokens. */
  tokens?: TokenPrices;
}

/**
 * Tinker's list prices per model (USD per million tokens), as third parties transcribed its pricing page in January
 * 2026 (/work/shared/reference/landscape.md, "Prices (billing-model anchors)"). Only the models whose three prices we
 * have a source for; any other needs `budget.prices.tokens`.
 */
export const TINKER_LIST_PRICES: Readonly<Record<string, TokenPrices>> = {
  'Qwen/Qwen3-8B': { prefill: 0.13, sample: 0.4, train: 0.4 },
};

/** Where each dialect's default price comes from, for messages and docs. */
export const PRICE_SOURCES: Readonly<Record<Dialect, string>> = {
  together: "the provider's estimate-cost quote (POST /rl/model-resources/estimate-cost: price_per_hour of the resource)",
  local: "the emulator's estimate-cost quote (it speaks Together's wire)",
  baseten: 'none: Baseten bills per minute per instance type (docs.baseten.co/observability/usage), at prices not published where we read',
  tinker: "Tinker's list price per model (third-party transcriptions of its pricing page, January 2026)",
};

/** How a round's spend is priced, once resolved (RoundPlan.pricing). */
export type RoundPricing =
  | { billing: 'gpu-time'; /** USD per hour of the whole resource. */ perHour: number; source: 'quote' | 'spec' }
  | { billing: 'tokens'; tokens: TokenPrices; source: 'list' | 'spec' };

/** Why a budget cannot be priced: the field to set, and the message. */
export interface PricingProblem {
  field: string;
  message: string;
}

/**
 * The round's pricing: the spec's rates first, then the dialect's documented default (a quote for GPU time, the list
 * for tokens). Undefined pricing comes back as a problem naming the field that would price it.
 */
export function roundPricing(options: {
  dialect: Dialect;
  model: string;
  gpuCount: number;
  prices?: PriceOverrides;
  /** `provider.tokenPrices` (the older field; `budget.prices.tokens` wins). */
  providerTokenPrices?: TokenPrices;
  /** The provider's quote for the resource (USD per hour), when it gave one. */
  quotePerHour?: number;
}): RoundPricing | PricingProblem {
  const { dialect, model, gpuCount, prices } = options;
  const a = abilitiesOf(dialect);
  if (a.billing === 'gpu-time') {
    if (prices?.gpuHour !== undefined) return { billing: 'gpu-time', perHour: prices.gpuHour * gpuCount, source: 'spec' };
    if (options.quotePerHour !== undefined) return { billing: 'gpu-time', perHour: options.quotePerHour, source: 'quote' };
    return {
      field: 'budget.prices.gpuHour',
      message: `${a.name} bills GPU time and gave no price for ${model} (default: ${PRICE_SOURCES[dialect]}); set budget.prices.gpuHour (USD per GPU-hour)`,
    };
  }
  const tokens = prices?.tokens ?? options.providerTokenPrices ?? TINKER_LIST_PRICES[model];
  if (tokens) return { billing: 'tokens', tokens, source: prices?.tokens || options.providerTokenPrices ? 'spec' : 'list' };
  return {
    field: 'budget.prices.tokens',
    message: `${a.name} bills tokens and its list has no price for ${model} (listed: ${Object.keys(TINKER_LIST_PRICES).join(', ')}); set budget.prices.tokens {prefill, sample, train} (USD per million)`,
  };
}

export function isPricingProblem(p: RoundPricing | PricingProblem): p is PricingProblem {
  return 'field' in p;
}

/** The dollars of tokens at a pricing (0 for GPU-time pricing: tokens are not what it bills). */
export function tokensUsd(pricing: RoundPricing, tokens: TokenUsage): number {
  return pricing.billing === 'tokens' ? tokenCostUsd(tokens, pricing.tokens) : 0;
}

/** The dollars of holding the resource for a time (0 for token pricing). */
export function heldUsd(pricing: RoundPricing, ms: number): number {
  return pricing.billing === 'gpu-time' ? (ms / 3_600_000) * pricing.perHour : 0;
}

/**
 * What closing a GPU-billed round costs beyond its last step: the training checkpoint and the release. Estimated as
 * twice the slowest step seen, plus 5 s: the budget watch stops training this much before the limit.
 */
export function closingReserveMs(slowestStepMs: number): number {
  return 2 * slowestStepMs + 5_000;
}

/**
 * The smallest billed amount of GPU time: Together bills per GPU-minute while READY (together-baseten-wire.md A.12),
 * Baseten by the minute (docs.baseten.co/observability/usage); the embedded emulator bills by the second.
 */
export const MIN_BILLED_MS: Readonly<Record<Dialect, number>> = { together: 60_000, baseten: 60_000, local: 1_000, tinker: 0 };

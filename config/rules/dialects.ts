/**
 * The provider dialects, and what orchestration needs to know of each, in one table: code outside providers/ asks
 * here rather than comparing a provider's kind. (How each dialect speaks is providers/<kind>/; `local` is the
 * embedded emulator, which speaks Together's.)
 */
export const PROVIDER_KINDS = ['local', 'together', 'baseten', 'tinker'] as const;
export type ProviderKind = (typeof PROVIDER_KINDS)[number];

/** What a provider bills: the GPU time a trainer is held, or the tokens processed (prefill, sample, train). */
export type Billing = 'gpu-time' | 'tokens';

const BILLING: Record<ProviderKind, Billing> = { local: 'gpu-time', together: 'gpu-time', baseten: 'gpu-time', tinker: 'tokens' };

export function billingOf(kind: ProviderKind): Billing {
  return BILLING[kind];
}

/**
 * How a dialect's sampler takes a seed and stop strings (config/rules/sampling.ts reads this):
 * - seeds `per-draw`: every draw sends a seed derived from its identity (the dialect takes one on any sampler);
 *   `explicit-single-generator`: none unless `sampling.seed` is set, which needs one generator replica. Together's
 *   guide, as issue #44 quotes it: "leave `seed` unset; it is unsupported and causes an internal error when the
 *   generator uses more than one inference engine" (docs/research/provider-caveats-2026-12.md §1: not found in the
 *   SDK or the visible docs, taken as quoted).
 * - stopStrings `sent`: the sampler takes them; `per-model`: the supported-models listing says per model (where it
 *   does not, none are sent); `never`: none are sent. Where none are sent the completion is cut in code.
 */
export interface SamplingAbilities {
  seeds: 'per-draw' | 'explicit-single-generator';
  stopStrings: 'sent' | 'per-model' | 'never';
}

const SAMPLING: Record<ProviderKind, SamplingAbilities> = {
  local: { seeds: 'explicit-single-generator', stopStrings: 'per-model' },
  together: { seeds: 'explicit-single-generator', stopStrings: 'per-model' },
  baseten: { seeds: 'per-draw', stopStrings: 'sent' },
  // Tinker takes stop token ids, not strings (providers/tinker/sampling.ts sends none either).
  tinker: { seeds: 'per-draw', stopStrings: 'never' },
};

export function samplingOf(kind: ProviderKind): SamplingAbilities {
  return SAMPLING[kind];
}

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

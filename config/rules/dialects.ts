/**
 * The provider dialects, and what orchestration needs to know of each, in one table: code outside providers/ asks
 * here rather than comparing a provider's kind. (How each dialect speaks is providers/<kind>/; `local` is the
 * embedded emulator, which speaks Together's.)
 */
export const DIALECTS = ['local', 'together', 'baseten', 'tinker'] as const;
export type Dialect = (typeof DIALECTS)[number];

/** What a provider bills: the GPU time a trainer is held, or the tokens processed (prefill, sample, train). */
export type Billing = 'gpu-time' | 'tokens';

const BILLING: Record<Dialect, Billing> = { local: 'gpu-time', together: 'gpu-time', baseten: 'gpu-time', tinker: 'tokens' };

export function billingOf(kind: Dialect): Billing {
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

const SAMPLING: Record<Dialect, SamplingAbilities> = {
  local: { seeds: 'explicit-single-generator', stopStrings: 'per-model' },
  together: { seeds: 'explicit-single-generator', stopStrings: 'per-model' },
  baseten: { seeds: 'per-draw', stopStrings: 'sent' },
  // Tinker takes stop token ids, not strings (providers/tinker/sampling.ts sends none either).
  tinker: { seeds: 'per-draw', stopStrings: 'never' },
};

export function samplingOf(kind: Dialect): SamplingAbilities {
  return SAMPLING[kind];
}

/** The policy losses a trainer has built in (round.grpo.loss.type). */
export type PolicyLoss = 'grpo' | 'ppo' | 'importance_sampling';

/**
 * What a dialect can do, as data: code and the spec's checks ask here (`abilitiesOf`) instead of comparing a provider's
 * kind. Each field says where the fact comes from (docs/providers.md keeps the sources).
 */
export interface DialectAbilities {
  /** The product's name in messages. */
  name: string;
  /** A `forward` then `custom_forward_backward` (the caller's d loss / d logprob per token): DPO, a user's own loss. */
  customLoss: boolean;
  /** The policy losses the trainer computes itself. */
  policyLosses: readonly PolicyLoss[];
  /** A frozen reference session beside the policy's (the reference logprobs a KL penalty needs). */
  referenceSession: boolean;
  /** Takes W&B settings (the provider logs to W&B itself). */
  wandb: boolean;
  /** What the provider bills. */
  billing: Billing;
  /**
   * Whether the server lists and searches sessions: `always`, or `probed` (a self-hosted server of the dialect, such
   * as SkyRL, may have none: learned from its 404 the first time).
   */
  sessionRoutes: 'always' | 'probed';
  /**
   * LoRA sessions one model resource holds at once: a number, `per-model` (the supported-models listing says, its
   * `adapter_capacity`), or 1 where a run is one session.
   */
  loraSessionsPerResource: number | 'per-model';
  /** How its sampler takes seeds and stop strings (`stopStrings` says where stop-string support is learned). */
  sampling: SamplingAbilities;
  /** Takes a checkpoint TTL (retention.ttl). */
  checkpointTtl: boolean;
  /** Takes run settings of its own (provider.baseten). */
  runSettings: boolean;
}

const ABILITIES: Record<Dialect, DialectAbilities> = {
  together: {
    name: 'Together',
    customLoss: true,
    policyLosses: ['grpo', 'ppo', 'importance_sampling'],
    referenceSession: true,
    wandb: true,
    billing: BILLING.together,
    sessionRoutes: 'always',
    loraSessionsPerResource: 'per-model',
    sampling: SAMPLING.together,
    checkpointTtl: false,
    runSettings: false,
  },
  local: {
    name: 'the embedded emulator',
    customLoss: true,
    policyLosses: ['grpo', 'ppo', 'importance_sampling'],
    referenceSession: true,
    wandb: true,
    billing: BILLING.local,
    sessionRoutes: 'always',
    loraSessionsPerResource: 'per-model',
    sampling: SAMPLING.local,
    checkpointTtl: false,
    runSettings: false,
  },
  baseten: {
    name: 'Baseten Loops',
    customLoss: false,
    policyLosses: ['ppo', 'importance_sampling'],
    referenceSession: false,
    wandb: false,
    billing: BILLING.baseten,
    sessionRoutes: 'always',
    loraSessionsPerResource: 1,
    sampling: SAMPLING.baseten,
    checkpointTtl: false,
    runSettings: true,
  },
  tinker: {
    name: 'Tinker',
    customLoss: true,
    policyLosses: ['ppo', 'importance_sampling'],
    referenceSession: true,
    wandb: false,
    billing: BILLING.tinker,
    sessionRoutes: 'probed',
    loraSessionsPerResource: 'per-model',
    sampling: SAMPLING.tinker,
    checkpointTtl: true,
    runSettings: false,
  },
};

export function abilitiesOf(dialect: Dialect): DialectAbilities {
  return ABILITIES[dialect];
}

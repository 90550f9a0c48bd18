/**
 * The provider dialects, and what orchestration needs to know of each, in one table: code outside providers/ and
 * emulator/ asks here (`abilitiesOf`) rather than comparing a provider's kind (test/unit/dialect-branches.test.ts
 * holds it so). How each dialect speaks is providers/<dialect>/; `local` is the embedded emulator, which speaks
 * Together's. README's and docs/providers.md's dialect tables are held to this one (test/unit/dialect-docs.test.ts).
 */
export const DIALECTS = ['local', 'together', 'baseten', 'tinker'] as const;
export type Dialect = (typeof DIALECTS)[number];

/** The wire protocols a provider client speaks (providers/<wire>/): every dialect speaks one of them. */
export type Wire = Exclude<Dialect, 'local'>;

/** What a provider bills: the GPU time a trainer is held, or the tokens processed (prefill, sample, train). */
export type Billing = 'gpu-time' | 'tokens';

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

/** The policy losses a trainer has built in (round.grpo.loss.type). */
export type PolicyLoss = 'grpo' | 'ppo' | 'importance_sampling';

/** The yes-or-no abilities: what a round kind or a spec field can need (config/io/spec-dialect-checks.ts). */
export type AbilityFlag = 'customLoss' | 'referenceSession' | 'wandb' | 'checkpointTtl' | 'runSettings';

/**
 * What a dialect can do, as data: code and the spec's checks ask here instead of comparing a provider's kind. Each
 * entry of the table says where its facts come from (`*-wire.md` are /work/shared/reference/'s notes).
 */
export interface DialectAbilities {
  /** The product's name in messages. */
  name: string;
  /** The wire its client speaks (the provider built for it: workers/providers.ts). */
  speaks: Wire;
  /**
   * The worker's own emulator: where the spec gives no base URL the worker's (ROUNDHOUSE_EMULATOR_URL, else the one it
   * embeds); the model must be one of the emulator's (checked before anything runs); and nothing but Roundhouse
   * creates resources there, so the reaper reaps an untagged one by default.
   */
  embedded: boolean;
  /** A `forward` then `custom_forward_backward` (the caller's d loss / d logprob per token): DPO, a user's own loss. */
  customLoss: boolean;
  /** The policy losses the trainer computes itself. */
  policyLosses: readonly PolicyLoss[];
  /**
   * A frozen reference session beside the policy's on the same trainer (`round.grpo.reference`: the reference
   * logprobs of a KL penalty, which only the `grpo` loss reads).
   */
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
   * LoRA sessions one trainer resource holds at once: `per-model` (the supported-models listing says, its
   * `adapter_capacity`: checked before provisioning a second session), 1 where a resource is one session, or
   * `unpublished` (no figure to check against: a refusal comes from the server).
   */
  loraSessionsPerResource: 1 | 'per-model' | 'unpublished';
  /** How its sampler takes seeds and stop strings (`stopStrings` says where stop-string support is learned). */
  sampling: SamplingAbilities;
  /** Takes a checkpoint TTL (retention.ttl). */
  checkpointTtl: boolean;
  /** Takes run settings of its own (provider.baseten). */
  runSettings: boolean;
  /** Why an ability is missing, where a refusal should say more than that it is. */
  why?: Partial<Record<AbilityFlag, string>>;
}

const TOGETHER: DialectAbilities = {
  name: 'Together',
  speaks: 'together',
  embedded: false,
  // providers/together/client.ts submitCustomForwardBackward: the `custom-forward-backward` operation (WIRE.md).
  customLoss: true,
  // The `LossType`s Roundhouse sends (providers/together/mapping.ts); the wire has CISPO, DPPO and DRO too.
  policyLosses: ['grpo', 'ppo', 'importance_sampling'],
  // A LoRA resource takes several sessions (5 by default), and GRPO's loss takes `reference_logprobs`
  // (/work/shared/reference/together-baseten-wire.md A.6, A.11).
  referenceSession: true,
  // Session `metadata.wandb` (together-baseten-wire.md A.5; activities/trainer.ts wandbMetadata sends it).
  wandb: true,
  // "Billing runs per GPU-minute only while READY" (together-baseten-wire.md A.3).
  billing: 'gpu-time',
  // `GET /rl/training-sessions` lists a resource's sessions (providers/together/client.ts listSessions).
  sessionRoutes: 'always',
  // `adapter_capacity` in `/rl/supported-models` (providers/together/wire.ts); 5 LoRA by default, 1 full-weight.
  loraSessionsPerResource: 'per-model',
  // Seeds: see SamplingAbilities. Stop strings: the listing's `supports_stop_strings` (providers/together/client.ts
  // supportedModels; docs/providers.md's refusal table: Together's listing says nothing today, so none are sent).
  sampling: { seeds: 'explicit-single-generator', stopStrings: 'per-model' },
  // Checkpoint creates take no TTL (together-baseten-wire.md A.6, A.10 name none).
  checkpointTtl: false,
  // Its resource settings are the spec's own fields (generatorReplicas, inactiveTimeoutSeconds), not a block of runs.
  runSettings: false,
};

const ABILITIES: Record<Dialect, DialectAbilities> = {
  together: TOGETHER,
  // The embedded emulator serves Together's wire (emulator/together/), so its abilities are Together's: it publishes
  // `adapter_capacity` and `supports_stop_strings` per model (emulator/together/routes.ts), stores W&B metadata, and
  // bills GPU-seconds while READY (emulator/engine).
  local: { ...TOGETHER, name: 'the embedded emulator', embedded: true },
  baseten: {
    name: 'Baseten Loops',
    speaks: 'baseten',
    embedded: false,
    // The trainer has no custom-loss route (providers/baseten/client.ts submitCustomForwardBackward refuses).
    customLoss: false,
    // Its loss names: cross_entropy, importance_sampling, ppo, dppo, cispo, dro; no grpo (together-baseten-wire.md
    // B.5).
    policyLosses: ['ppo', 'importance_sampling'],
    // A run is one session (providers/baseten/client.ts listSessions: the run itself), and a second
    // `init_trainer_server` resets the run's adapter (providers/baseten/WIRE.md).
    referenceSession: false,
    // The REST API takes no W&B settings; the SDK's `create_lora_training_client(…, wandb?)` logs from the client.
    wandb: false,
    // A run's GPUs bill while it is up, until it scales to zero (docs/providers.md, Baseten Loops).
    billing: 'gpu-time',
    // A run is found by its id (providers/baseten/client.ts listSessions).
    sessionRoutes: 'always',
    loraSessionsPerResource: 1,
    // vLLM's completions body takes `seed` and `stop` (docs/providers.md, Baseten's sampler; providers/baseten/sampling.ts).
    sampling: { seeds: 'per-draw', stopStrings: 'sent' },
    // `save_state(name)` takes a name only; checkpoints survive the run, retention unpublished (together-baseten-wire.md B.8).
    checkpointTtl: false,
    // provider.baseten: `CreateLoopsRunRequest`'s availability model, replicas, reuse and scale-down delay.
    runSettings: true,
    why: {
      referenceSession:
        "a run is one session, and opening a reference session re-initializes the run and loads the reference state over the policy's weights and optimizer state",
      wandb: 'the baseten-loops SDK starts the W&B run on the client',
    },
  },
  tinker: {
    name: 'Tinker',
    speaks: 'tinker',
    embedded: false,
    // The SDK's `forward_backward_custom`: a forward, then cross-entropy weighted by −∂loss/∂logprob
    // (providers/tinker/client.ts submitCustomForwardBackward).
    customLoss: true,
    // `loss_fn`: cross_entropy, importance_sampling, ppo, cispo, dro; no grpo (tinker-wire.md §3).
    policyLosses: ['ppo', 'importance_sampling'],
    // A Tinker session holds several models, so a frozen second model opens beside the policy
    // (providers/tinker/models.ts openSession); but no Tinker loss reads reference logprobs, so no KL penalty.
    referenceSession: true,
    // No request of the wire takes W&B settings (tinker-wire.md §2).
    wandb: false,
    // Tokens, priced per million (docs/providers.md, Tinker: "it bills the tokens it processes").
    billing: 'tokens',
    // SkyRL's server has none of `sessions/search`, `GET sessions/{id}`, `sessions/{id}/finish` (providers/tinker/
    // sessions.ts traits.sessionRoutes, learned from a 404).
    sessionRoutes: 'probed',
    // A session holds models by `model_seq_id`; the service publishes no limit (tinker-wire.md §13: cookbook#55),
    // and SkyRL refuses past its LoRA adapter maximum at the create (docs/providers.md, self-hosted).
    loraSessionsPerResource: 'unpublished',
    // `sampling_params.seed` (tinker-wire.md §2.3). `stop` takes a string, strings or token ids on the wire
    // (providers/tinker/WIRE.md), but the emulator serves token ids only (emulator/tinker/operations.ts), so
    // providers/tinker/sampling.ts sends no stop strings.
    sampling: { seeds: 'per-draw', stopStrings: 'never' },
    // `ttl_seconds` on `save_weights` / `save_weights_for_sampler` (tinker-wire.md §2.2, §4).
    checkpointTtl: true,
    // Nothing of the run's own to set: a session is made with tags, metadata and a project only (tinker-wire.md §2.1).
    runSettings: false,
  },
};

export function abilitiesOf(dialect: Dialect): DialectAbilities {
  return ABILITIES[dialect];
}

export function billingOf(dialect: Dialect): Billing {
  return ABILITIES[dialect].billing;
}

export function samplingOf(dialect: Dialect): SamplingAbilities {
  return ABILITIES[dialect].sampling;
}

/** The dialects that have an ability (for messages naming where a field is taken). */
export function dialectsWith(has: (a: DialectAbilities) => boolean): Dialect[] {
  return DIALECTS.filter((d) => has(ABILITIES[d]));
}

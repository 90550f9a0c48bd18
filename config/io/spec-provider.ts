import { z } from 'zod';
import { DIALECTS } from '../rules/dialects';

/**
 * How Baseten Loops creates the round's run (docs.baseten.co, `CreateLoopsRunRequest`): `spot` runs on reclaimable
 * capacity and "cannot be resumed" once its GPUs are reclaimed, so the round recovers on a new run from its last
 * checkpoint; a run with more than one replica never reuses a warm run; a spot run reuses only a spot one.
 */
export const BasetenRunSpecSchema = z
  .object({
    availabilityModel: z.enum(['dedicated', 'spot']).default('dedicated'),
    /** Data-parallel trainer replicas (the service documents ≥ 1 and no maximum; 64 is ours). */
    replicas: z.number().int().min(1).max(64).default(1),
    /** A prior run of the same base model and team whose warm trainer (and sampler) the new run may reuse. */
    reuseFromRunId: z.string().trim().min(1).max(255).optional(),
    /** Idle seconds before the run scales to zero: the service takes 1 to 3600. */
    scaleDownDelaySeconds: z.number().int().min(1).max(3600).default(900),
  })
  .strict();

export const ProviderSpecSchema = z
  .object({
    kind: z.enum(DIALECTS),
    /** Omitted for `local`: the worker's own emulator. */
    baseUrl: z.url({ protocol: /^https?$/ }).optional(),
    model: z.string().min(1),
    /** A folder or tokenizer.json to tokenise with, when the model's tokenizer is not bundled or cached. */
    tokenizer: z.string().min(1).optional(),
    /**
     * Generator (sampler) replicas to provision. Unset: 1 where the round samples, 0 (a trainer-only resource, no idle
     * generator billed) where it never does: dpo, and sft with `evaluation.sampleAnswers: false`. 0 is refused for a
     * round that samples.
     */
    generatorReplicas: z.number().int().min(0).max(16).optional(),
    /** Provider-side auto-stop after this much idleness: a safety net behind the reaper. */
    inactiveTimeoutSeconds: z.number().int().min(300).max(86_400).default(1800),
    /**
     * What the provider charges per million tokens (USD), for a provider that bills tokens (Tinker): the round's
     * estimated cost is its counted tokens at these prices. Take them from the provider's price list for the model.
     */
    tokenPrices: z
      .object({ prefill: z.number().min(0).max(1000), sample: z.number().min(0).max(1000), train: z.number().min(0).max(1000) })
      .strict()
      .optional(),
    /** Baseten Loops' run settings (its `CreateLoopsRunRequest`); only with kind baseten. Absent: the service's defaults. */
    baseten: BasetenRunSpecSchema.optional(),
  })
  .strict();

export type ProviderSpec = z.infer<typeof ProviderSpecSchema>;

import { descriptorOf, type StepBatch, type TrainerShapeSpec } from './round-kinds';

export type { StepBatch, TrainerShapeSpec } from './round-kinds';

/**
 * What a round needs of the trainer it provisions, from its spec alone (pure: the spec's checks, `prepareRound` and
 * the provisioning activity share it): whether anything samples on its generator, and how many sequences one
 * training step's forward-backward sends.
 *
 * Every round provisions a trainer of its own and releases it at its end (a recovery provisions again from the same
 * spec), so a trainer never serves rounds of different needs: the round's own spec decides. Nothing after a round
 * samples on its trainer: the campaign's promotion re-scores a champion in a round of its own (which samples, so it
 * gets a generator), and a sampler checkpoint is saved by the trainer (Together's own SFT quickstart saves one on a
 * trainer-only resource).
 */

/** Why the round samples on its trainer's generator; undefined when it never does (DPO, SFT without sampled answers). */
export function generatorNeedOf(spec: TrainerShapeSpec): string | undefined {
  return descriptorOf(spec).generatorNeed(spec);
}

/**
 * The generator replicas to provision: the spec's `provider.generatorReplicas`, else 1 where the round samples and
 * 0 (a trainer-only resource: no idle generator to pay for) where it never does.
 */
export function generatorReplicasOf(spec: TrainerShapeSpec): number {
  return spec.provider.generatorReplicas ?? (generatorNeedOf(spec) ? 1 : 0);
}

/** `provider.generatorReplicas: 0` on a round that samples: what is wrong with the field's value, and why. */
export function generatorReplicasProblem(spec: TrainerShapeSpec): string | undefined {
  const need = generatorNeedOf(spec);
  if (spec.provider.generatorReplicas !== 0 || !need) return undefined;
  return `0 provisions a trainer-only resource, with no generator to sample on, but ${need}; set it to 1 or more (or leave it unset)`;
}

export function stepBatchOf(spec: TrainerShapeSpec): StepBatch {
  return descriptorOf(spec).stepBatch(spec);
}

/**
 * A training step's batch over the model's `maxBatchSize` ("Maximum global batch size accepted by a forward-backward
 * step", Together's supported-models listing; Baseten's capabilities; for Tinker our assumption, see
 * providers/tinker/sessions.ts): the refusal, naming the fields.
 */
export function stepBatchProblem(spec: TrainerShapeSpec, model: { name: string; maxBatchSize: number }): string | undefined {
  const batch = stepBatchOf(spec);
  if (batch.sequences <= model.maxBatchSize) return undefined;
  return `${batch.from} = ${batch.sequences} sequences per forward-backward step, over ${model.name}'s maximum batch size of ${model.maxBatchSize}: make the batch smaller`;
}

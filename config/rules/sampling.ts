import { samplingOf, type Dialect } from './dialects';

/**
 * What one draw sends for `seed` and `stop`, by the dialect table (dialects.ts) and the model's listing. Every sample
 * path (evaluation, GRPO, the episodes' gateway) asks here, so a dialect that takes no seed or no stop strings gets
 * none from any of them.
 */

/** The parts of a spec a draw's seed depends on. */
export interface SeedSpec {
  /** Unset: the round's default (1 where it samples: config/rules/trainer-shape.ts). */
  provider: { kind: Dialect; generatorReplicas?: number };
  training: { seed: number };
  sampling: { seed?: number };
}

/**
 * The seed a round's draws derive theirs from, or undefined: they send none. `sampling.seed` when set; else, where
 * every sampler of the dialect takes a seed, `training.seed`; else none (Together). Without a seed a draw issued
 * again under a new idempotency key (a re-run round, a rolled-back lineage, a turn whose prompt changed) draws other
 * text. A draw issued again under its own key still returns what was drawn: the provider answers a repeated key with
 * the recorded operation, and GRPO's samples (the step's samples file) and the gateway's turns (the episode's
 * records) are recorded before they are used. So exactly-once never rests on the seed.
 */
export function seedBase(spec: SeedSpec): number | undefined {
  if (spec.sampling.seed !== undefined) return spec.sampling.seed;
  return samplingOf(spec.provider.kind).seeds === 'per-draw' ? spec.training.seed : undefined;
}

/** One draw's seed, derived from the round's base (`derive`: e.g. a step's or an evaluation batch's), or none. */
export function drawSeed(spec: SeedSpec, derive: (base: number) => number): number | undefined {
  const base = seedBase(spec);
  return base === undefined ? undefined : derive(base);
}

/** Why `sampling.seed` cannot be honoured on this provider, if it cannot: the spec refuses it before provisioning. */
export function seedProblem(spec: SeedSpec): string | undefined {
  const { kind } = spec.provider;
  const generatorReplicas = spec.provider.generatorReplicas ?? 1;
  if (spec.sampling.seed === undefined || samplingOf(kind).seeds !== 'explicit-single-generator' || generatorReplicas <= 1)
    return undefined;
  return (
    `is not supported on ${kind} with provider.generatorReplicas ${generatorReplicas}: Together's guide says a seed ` +
    'is unsupported and fails sampling with an internal error when the generator runs more than one inference engine; ' +
    'remove sampling.seed (draws then send none) or use generatorReplicas: 1'
  );
}

/**
 * The stop strings a draw sends: none where the dialect takes none, or its listing says the model does not (or does
 * not say). The caller cuts the completion at the spec's stop strings in code either way (completionText,
 * tokensThroughStop), so a completion may be billed past its stop where none was sent.
 */
export function stopToSend(kind: Dialect, model: { stopStrings?: boolean }, stop: readonly string[] | undefined): string[] | undefined {
  if (!stop?.length) return undefined;
  const ability = samplingOf(kind).stopStrings;
  const sent = ability === 'sent' || (ability === 'per-model' && model.stopStrings === true);
  return sent ? [...stop] : undefined;
}

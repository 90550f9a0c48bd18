import type { Dialect } from './dialects';

// Pure (no Temporal, no Node): how a round records the trainers it holds where the reaper reads them (its memo,
// returned by visibility listings), shared by the round workflow, the provisioning activity and the reaper.

/** The round's memo field listing the trainers it created and has not released yet. */
export const TRAINERS_MEMO = 'roundhouseTrainers';

/** The signal the provisioning activity sends its round the moment a create answers (before readiness). */
export const TRAINER_CREATED_SIGNAL = 'roundTrainerCreated';

/** A trainer as a round records it: enough for a reaper in the same namespace to find and release it. */
export interface RegisteredTrainer {
  resourceId: string;
  /** The spec's provider kind and endpoint (absent: the kind's default endpoint). Never a key. */
  kind: Dialect;
  baseUrl?: string;
}

/** The endpoint a trainer lives on, as one string: `kind` or `kind@baseUrl`. */
export function endpointOf(t: Pick<RegisteredTrainer, 'kind' | 'baseUrl'>): string {
  return t.baseUrl ? `${t.kind}@${t.baseUrl}` : t.kind;
}

/** Reads the memo field back (tolerant: a memo written by other code is ignored). */
export function registeredTrainers(memo: Record<string, unknown> | undefined): RegisteredTrainer[] {
  const value = memo?.[TRAINERS_MEMO];
  if (!Array.isArray(value)) return [];
  return value.filter(
    (t): t is RegisteredTrainer =>
      typeof t === 'object' &&
      t !== null &&
      typeof (t as RegisteredTrainer).resourceId === 'string' &&
      typeof (t as RegisteredTrainer).kind === 'string',
  );
}

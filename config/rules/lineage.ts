/**
 * Lineages: after a rollback a round trains on under a new lineage (its keys carry `L<n>`: config/rules/keys.ts), so
 * what an abandoned lineage did past the rollback point is not in the weights the round keeps. One rule for
 * everything recorded per step (step records, evaluations during training).
 */

/** A rollback: from this lineage on, training resumed from round step `toStep`. */
export interface Rollback {
  lineage: number;
  toStep: number;
}

/** What a lineage recorded at a round step (absent lineage: the first). */
export interface LineageEntry {
  step: number;
  lineage?: number;
}

/**
 * What the kept weights hold, one entry per step, in step order. A rollback to `toStep` under lineage L voids the
 * older lineages' entries past `toStep`; of the rest at a step, the newest lineage's wins (of equals, the later).
 */
export function keptByLineage<T extends LineageEntry>(entries: Iterable<T>, rollbacks: readonly Rollback[]): T[] {
  const lineageOf = (e: LineageEntry) => e.lineage ?? 0;
  const kept = (e: T) => rollbacks.every((rb) => rb.lineage <= lineageOf(e) || e.step <= rb.toStep);
  const byStep = new Map<number, T>();
  for (const e of entries) {
    const held = byStep.get(e.step);
    if (kept(e) && (held === undefined || lineageOf(held) <= lineageOf(e))) byStep.set(e.step, e);
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

// Pure (no Temporal, no Node): checkpoint retention — which of a campaign's checkpoints to keep, and where the
// checkpoints that open or scheduled workflows start from are recorded so retention never takes one of them.

/** The memo field of a campaign or round listing the checkpoints it starts from (retention never deletes them). */
export const CHECKPOINT_REFS_MEMO = 'roundhouseCheckpointRefs';

/** The memo that records `checkpointIds` as referenced (none: no memo). */
export function checkpointRefsMemo(checkpointIds: (string | undefined)[]): Record<string, string[]> | undefined {
  const ids = checkpointIds.filter((id): id is string => typeof id === 'string' && id.length > 0);
  return ids.length ? { [CHECKPOINT_REFS_MEMO]: ids } : undefined;
}

/** Reads the memo field back (tolerant: a memo written by other code is ignored). */
export function checkpointRefsOf(memo: Record<string, unknown> | undefined): string[] {
  const value = memo?.[CHECKPOINT_REFS_MEMO];
  return Array.isArray(value) ? value.filter((id): id is string => typeof id === 'string') : [];
}

export interface RetentionRule {
  /** The best k rounds' final checkpoints (by the metric, then eval loss). */
  keepBest: number;
  /** The last n rounds' final checkpoints. */
  keepLast: number;
}

/**
 * The deletion rule a spec's `retention` block asks for. `keepBest`/`keepLast` default to 1 and 2; a block that sets
 * only `ttl` (a provider-side expiry) asks for no deletion, so none is made. Unset: none.
 */
export function deletionRuleOf(retention: { keepBest?: number; keepLast?: number; ttl?: number } | undefined): RetentionRule | undefined {
  if (!retention) return undefined;
  if (retention.ttl !== undefined && retention.keepBest === undefined && retention.keepLast === undefined) return undefined;
  return { keepBest: retention.keepBest ?? 1, keepLast: retention.keepLast ?? 2 };
}

/** A checkpoint as retention sees it (activities/checkpoints.ts CheckpointEntry). */
export interface RetainedCandidate {
  round: number;
  kind: 'training' | 'sampler';
  checkpoint_id: string;
  step: number;
  final: boolean;
  metric?: number | null;
  eval_loss?: number | null;
}

export type KeepReason = 'best' | 'last' | 'referenced';

export interface RetentionPlan<C extends RetainedCandidate = RetainedCandidate> {
  keep: (C & { reasons: KeepReason[] })[];
  /** Not kept by the rule and referenced by nothing: retention deletes these where the provider has a delete call. */
  expendable: C[];
}

/**
 * Keeps the final checkpoints (training and sampler) of the best `keepBest` rounds and of the last `keepLast`
 * rounds, and every checkpoint in `referenced` (what an open or scheduled workflow starts from); the rest — rolling
 * checkpoints, and the final ones of the other rounds — is expendable.
 */
export function retentionPlan<C extends RetainedCandidate>(
  checkpoints: C[],
  rule: RetentionRule,
  referenced: Set<string>,
): RetentionPlan<C> {
  const finals = checkpoints.filter((c) => c.final && c.kind === 'training');
  const rounds = [...new Set(finals.map((c) => c.round))].sort((a, b) => b - a);
  const lastRounds = new Set(rounds.slice(0, rule.keepLast));
  const ranked = [...finals].sort(
    (a, b) =>
      (b.metric ?? -Infinity) - (a.metric ?? -Infinity) || (a.eval_loss ?? Infinity) - (b.eval_loss ?? Infinity) || b.round - a.round,
  );
  const bestRounds = new Set(
    ranked
      .filter((c) => typeof c.metric === 'number' || typeof c.eval_loss === 'number')
      .slice(0, rule.keepBest)
      .map((c) => c.round),
  );
  const plan: RetentionPlan<C> = { keep: [], expendable: [] };
  for (const c of checkpoints) {
    const reasons: KeepReason[] = [];
    if (c.final && bestRounds.has(c.round)) reasons.push('best');
    if (c.final && lastRounds.has(c.round)) reasons.push('last');
    if (referenced.has(c.checkpoint_id)) reasons.push('referenced');
    if (reasons.length) plan.keep.push({ ...c, reasons });
    else plan.expendable.push(c);
  }
  return plan;
}

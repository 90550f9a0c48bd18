/**
 * Early stopping (`evaluation.earlyStop`), a pure function of the evaluation curve: the best point (lowest eval loss,
 * or highest metric, by more than `minDelta` over the best before it), and whether `patience` evaluations have passed
 * since it. Points that did not measure the rule's figure (an unsampled pass, for the metric) are not counted.
 */
/** Where early stopping stands on a curve: the best point so far, and how many evaluations since it improved. */
export function earlyStopState(
  curve: { step: number; loss: number; metric?: number }[],
  rule: { patience: number; minDelta: number; on: 'loss' | 'metric' },
): { best?: number; bestValue?: number; sinceBest: number; stop: boolean; improved: boolean } {
  let best: number | undefined;
  let bestValue: number | undefined;
  let sinceBest = 0;
  let improved = false;
  for (const p of curve) {
    const value = rule.on === 'loss' ? p.loss : p.metric;
    if (value === undefined || !Number.isFinite(value)) continue; // a pass that did not measure the rule's figure
    const better = bestValue === undefined || (rule.on === 'loss' ? value < bestValue - rule.minDelta : value > bestValue + rule.minDelta);
    improved = better;
    if (better) {
      best = p.step;
      bestValue = value;
      sinceBest = 0;
    } else sinceBest += 1;
  }
  return { best, bestValue, sinceBest, stop: sinceBest >= rule.patience, improved };
}

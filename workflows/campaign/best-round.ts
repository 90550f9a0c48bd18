import type { CampaignProgress, RoundSummary } from './contract';

/**
 * The campaign's best round, as its best checkpoint is chosen (activities/checkpoints.ts): the highest eval accuracy,
 * then the lower eval loss, then the later round. Eval alone chooses; the round's test figure is shown beside it.
 */
export function bestOf(rounds: RoundSummary[]): { best?: CampaignProgress['best'] } {
  let best: RoundSummary | undefined;
  for (const r of rounds) {
    if (r.status !== 'completed' || r.accuracy === undefined || !r.trainingCheckpointId) continue;
    if (best === undefined || r.accuracy > best.accuracy!) best = r;
    else if (r.accuracy === best.accuracy && (r.trainedLoss ?? Infinity) <= (best.trainedLoss ?? Infinity)) best = r;
  }
  if (!best) return {};
  return {
    best: {
      round: best.round,
      accuracy: best.accuracy!,
      ...(best.trainingCheckpointId ? { checkpointId: best.trainingCheckpointId } : {}),
      ...(best.test ? { test: best.test } : {}),
    },
  };
}

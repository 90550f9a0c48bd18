import type { EvaluationPoint } from './contract';
import { earlyStopState } from '../../config/rules/early-stop';
import { keptByLineage } from '../../config/rules/lineage';
import { ROUND_KIND } from '../../config/rules/round-kinds';
import type { RoundTrainer } from './trainer';

/**
 * Evaluation during training (`evaluation.every`) and early stopping (`evaluation.earlyStop`). Segments end where an
 * evaluation is due (activities/segment.ts), so the weights measured are exactly the step's; the pass runs between
 * two segments, and training goes on as soon as it answers. With early stopping, each new best is saved as a training
 * checkpoint; when `patience` evaluations pass without improvement, training stops and the round reopens its session
 * from the best checkpoint, so its sampler weights, final figures and training checkpoint are the best weights'.
 */

/** Whether an evaluation is due at this confirmed step (not at the start or the end: the round measures those). */
export function evaluationDue(trainer: RoundTrainer, step: number, totalSteps: number): boolean {
  const every = trainer.input.spec.evaluation.every;
  if (!every || step <= 0 || step >= totalSteps || step % every !== 0) return false;
  return !trainer.evaluations.some((p) => p.step === step && (p.lineage ?? 0) === trainer.lineage);
}

/** The curve the kept weights have (config/rules/lineage.ts). */
export function keptCurve(trainer: RoundTrainer): EvaluationPoint[] {
  return keptByLineage(trainer.evaluations, trainer.rollbacks);
}

/** Evaluates the weights at `step`; with early stopping, saves a new best and says whether training should stop. */
export async function evaluateDuring(trainer: RoundTrainer, step: number, totalSteps: number): Promise<void> {
  const { input, state } = trainer;
  const e = input.spec.evaluation;
  const kind = ROUND_KIND[state.kind];
  const sample = e.sampleEvery !== undefined && (step / e.every!) % e.sampleEvery === 0;
  const { usage, ...point } = await trainer.activities.onTrainer.evaluateDuringTraining({
    campaignId: input.campaignId,
    round: input.round,
    label: `eval-s${step}`,
    lineage: trainer.lineage || undefined,
    spec: input.spec,
    data: trainer.data,
    sessionId: trainer.sessionId,
    ...state.spendGuard(),
    step,
    at: Date.now(),
    samplesPath: sample && kind.samples !== 'never' ? state.files.evaluationsAt(step, trainer.lineage) : undefined,
    // Preference pairs are measured against the reference logprobs the baseline computed.
    referencePath: kind.data === 'pairs' ? state.files.referenceLogprobs : undefined,
    stepsDir: state.files.steps,
    totalSteps,
  });
  state.addUsage(usage);
  trainer.evaluations.push(point);
  const rule = e.earlyStop;
  if (rule) {
    const standing = earlyStopState(keptCurve(trainer), rule);
    if (standing.improved && standing.best === step) {
      const saved = await trainer.activities.onTrainer.saveTrainingCheckpoint({
        spec: input.spec,
        sessionId: trainer.sessionId,
        key: trainer.key('best', `s${step}`),
      });
      point.checkpointId = saved.checkpointId;
      trainer.noteCheckpoint({ checkpointId: saved.checkpointId, step, savedAtMs: Date.now(), lineage: trainer.lineage });
    }
    const best = keptCurve(trainer).find((p) => p.step === standing.best);
    if (standing.stop && best?.checkpointId) {
      state.result.earlyStop = {
        on: rule.on,
        stoppedAtStep: step,
        bestStep: best.step,
        bestValue: standing.bestValue!,
        bestCheckpointId: best.checkpointId,
        patience: rule.patience,
      };
    }
  }
  const curve = keptCurve(trainer);
  state.result.evaluationCurve = curve;
  state.progress.evaluations = curve
    .slice(-8)
    .map((p) => ({ step: p.step, loss: p.loss, ...(p.metric !== undefined ? { metric: p.metric } : {}) }));
  await state.tell('training'); // the curve reaches `watch` now, not at the next throttled segment end
}

/**
 * After an early stop: the session reopened from the best checkpoint (on the same trainer when it is ready, else on a
 * new one), so what the round measures, samples and hands on is the best weights. Returns that checkpoint.
 */
export async function restoreBest(trainer: RoundTrainer): Promise<{ checkpointId: string; step: number }> {
  const early = trainer.state.result.earlyStop!;
  const where = await trainer.whereToReopen();
  await trainer.reopenFrom({ checkpointId: early.bestCheckpointId, loadOptimizer: true, step: early.bestStep }, where);
  return { checkpointId: early.bestCheckpointId, step: early.bestStep };
}

import type { RoundActivities } from './activities';
import type { RoundInput, RoundResult, SegmentInput, SegmentOutcome } from './contract';
import type { RoundTrainer } from './trainer';
import { segmentActivityOf, type RoundKind } from '../../config/rules/round-kinds';

/**
 * What changes with the round kind (`spec.round.kind`) in the workflow: how the round is measured before and after
 * training, and what a training segment is. Everything else (lease, segments' protocol, checkpoints, cleanup) is the
 * same, and what differs outside the workflow is the kind's descriptor (config/rules/round-kinds.ts).
 *   sft   segments of cross-entropy steps; baseline/trained = eval loss; accuracy from sampled answers.
 *   grpo  segments of sample-groups → rewards → policy-gradient step → weights sync; a frozen reference session
 *         when the loss has a KL penalty; accuracy from sampled answers.
 *   dpo   reference logprobs of every pair first (kept in a file), then segments of forward → DPO gradients →
 *         custom forward-backward → optim step; baseline/trained = eval DPO loss; accuracy = preference accuracy.
 *   custom segments of forward → the user's loss function (Python) → custom forward-backward → optim step;
 *         baseline/trained = the function's loss and metrics on the eval set; accuracy from sampled answers, opt-in.
 * Each step returns the figures it measured; the round puts them on its result.
 */
export interface RoundKindSteps {
  /** A frozen second session holding the starting weights (GRPO's KL reference). */
  referenceSession(input: RoundInput): boolean;
  baseline(trainer: RoundTrainer): Promise<BaselineFigures>;
  segment(activities: RoundActivities['segments'], trainer: RoundTrainer, segment: SegmentInput): Promise<SegmentOutcome>;
  /**
   * After the sampler weights are saved: sample, score and measure the trained weights. `measured` is told each figure
   * as it is measured, so a round that fails later in its evaluation still reports what it measured before.
   */
  evaluate(trainer: RoundTrainer, measured: (figures: EvaluationFigures) => void): Promise<EvaluationFigures>;
}

/** What a kind measures of the starting weights. */
export type BaselineFigures = Required<Pick<RoundResult, 'baselineLoss'>> &
  Pick<RoundResult, 'baselineAccuracy' | 'baselineMargin' | 'baselineLossMetrics'>;

/** What a kind measures of the trained weights. */
export type EvaluationFigures = Pick<
  RoundResult,
  | 'accuracy'
  | 'passAtK'
  | 'evaluationsPath'
  | 'poolEvaluationsPath'
  | 'poolAccuracy'
  | 'test'
  | 'trainedMargin'
  | 'trainedLoss'
  | 'trainedLossMetrics'
>;

/** SFT and GRPO: loss of the eval answers before and after, accuracy of sampled answers (and of the pool). */
const sampled: Pick<RoundKindSteps, 'baseline' | 'evaluate'> = {
  async baseline(trainer) {
    const baseline = await trainer.activities.onTrainer.measureLoss({ ...trainer.phaseInput(), label: 'baseline', which: 'eval' });
    trainer.state.addUsage(baseline.usage);
    return { baselineLoss: baseline.perToken };
  },
  async evaluate(trainer, measured) {
    const { state, input } = trainer;
    // Eval loss only (an sft round's `evaluation.sampleAnswers: false`): its trainer has no generator to sample on.
    const answers = input.spec.evaluation.sampleAnswers !== false ? await sampleAndScoreAll(trainer, measured) : {};
    await state.tell('evaluating');
    const trained = await trainer.activities.onTrainer.measureLoss({ ...trainer.phaseInput(), label: 'trained', which: 'eval' });
    state.addUsage(trained.usage);
    return { ...answers, trainedLoss: trained.perToken };
  },
};

/** The trained weights' sampled answers, scored: the eval set's (the round's accuracy), the pool's, the test set's. */
async function sampleAndScoreAll(trainer: RoundTrainer, measured: (figures: EvaluationFigures) => void): Promise<EvaluationFigures> {
  const { state, input } = trainer;
  const figures: EvaluationFigures = {};
  const note = (more: EvaluationFigures) => measured(Object.assign(figures, more));
  await state.tell('sampling');
  const evaluationsPath = state.files.evaluations;
  const scored = await trainer.activities.onTrainer.sampleAndScore({
    ...trainer.phaseInput(),
    outputPath: evaluationsPath,
    label: 'sample',
  });
  state.addUsage(scored.usage);
  note({ accuracy: scored.accuracy, ...(scored.passAtK ? { passAtK: scored.passAtK } : {}), evaluationsPath });
  if (input.pool) {
    const poolEvaluationsPath = state.files.poolEvaluations;
    const pool = await trainer.activities.onTrainer.sampleAndScore({
      ...trainer.phaseInput(),
      outputPath: poolEvaluationsPath,
      label: 'pool',
      dataset: input.pool,
    });
    state.addUsage(pool.usage);
    note({ poolEvaluationsPath, poolAccuracy: pool.accuracy });
  }
  if (input.data.test) {
    // The final assessment: the same sampling and scorer as eval, on rows nothing was chosen by.
    const testEvaluationsPath = state.files.testEvaluations;
    const test = await trainer.activities.onTrainer.sampleAndScore({
      ...trainer.phaseInput(),
      outputPath: testEvaluationsPath,
      label: 'test',
      which: 'test',
    });
    state.addUsage(test.usage);
    note({
      test: {
        accuracy: test.accuracy,
        rows: test.total,
        ...(test.sha256 ? { sha256: test.sha256 } : {}),
        evaluationsPath: testEvaluationsPath,
      },
    });
  }
  return figures;
}

export const ROUND_KIND_STEPS: Record<RoundKind, RoundKindSteps> = {
  sft: {
    ...sampled,
    referenceSession: () => false,
    segment: (segments, _run, segment) => segments[segmentActivityOf('sft')](segment),
  },
  grpo: {
    ...sampled,
    referenceSession: (input) => Boolean(input.spec.round?.grpo?.reference),
    segment: (segments, trainer, segment) =>
      segments[segmentActivityOf('grpo')]({
        ...segment,
        samplesDir: trainer.state.files.samples(trainer.lineage),
        referenceSessionId: trainer.referenceSessionId,
        ...(trainer.input.spec.round?.grpo?.reward?.kind === 'python' ? { rewardsDir: trainer.state.files.rewards } : {}),
        ...(trainer.input.spec.round?.grpo?.environment ? { episodesDir: trainer.state.files.episodes } : {}),
        ...(trainer.input.spec.round?.grpo?.loss.kind === 'python' ? { lossDir: trainer.state.files.losses } : {}),
      }),
  },
  dpo: {
    referenceSession: () => false,
    async baseline(trainer) {
      const referencePath = trainer.state.files.referenceLogprobs;
      const reference = await trainer.activities.onTrainer.computeDpoReference({
        ...trainer.phaseInput(),
        stepOffset: trainer.stepOffset,
        outputPath: referencePath,
      });
      const baseline = await trainer.activities.onTrainer.evaluateDpo({ ...trainer.phaseInput(), label: 'baseline', referencePath });
      trainer.state.addUsage(reference.usage);
      trainer.state.addUsage(baseline.usage);
      return { baselineLoss: baseline.loss, baselineAccuracy: baseline.accuracy, baselineMargin: baseline.meanMargin };
    },
    segment: (segments, trainer, segment) =>
      segments[segmentActivityOf('dpo')]({ ...segment, referencePath: trainer.state.files.referenceLogprobs }),
    async evaluate(trainer) {
      await trainer.state.tell('evaluating');
      const evaluationsPath = trainer.state.files.evaluations;
      const trained = await trainer.activities.onTrainer.evaluateDpo({
        ...trainer.phaseInput(),
        label: 'trained',
        referencePath: trainer.state.files.referenceLogprobs,
        outputPath: evaluationsPath,
      });
      trainer.state.addUsage(trained.usage);
      return { evaluationsPath, accuracy: trained.accuracy, trainedMargin: trained.meanMargin, trainedLoss: trained.loss };
    },
  },
  custom: {
    referenceSession: () => false,
    async baseline(trainer) {
      const { referencePath } = customFiles(trainer);
      if (referencePath) {
        const reference = await trainer.activities.onTrainer.computeCustomReference({
          ...trainer.phaseInput(),
          stepOffset: trainer.stepOffset,
          outputPath: referencePath,
        });
        trainer.state.addUsage(reference.usage);
      }
      const baseline = await evaluateCustomLoss(trainer, 'baseline');
      return { baselineLoss: baseline.loss, baselineLossMetrics: baseline.metrics };
    },
    segment: (segments, trainer, segment) => segments[segmentActivityOf('custom')]({ ...segment, ...customFiles(trainer) }),
    async evaluate(trainer, measured) {
      // Sampled answers are opt-in for a custom round (its rows may have none).
      const answers = trainer.input.spec.evaluation.sampleAnswers === true ? await sampleAndScoreAll(trainer, measured) : {};
      await trainer.state.tell('evaluating');
      const trained = await evaluateCustomLoss(trainer, 'trained');
      return { ...answers, trainedLoss: trained.loss, trainedLossMetrics: trained.metrics };
    },
  },
};

/** Where a custom round's loss calls are recorded, and its reference logprobs when `round.custom.reference` asks for them. */
function customFiles(trainer: RoundTrainer): { lossDir: string; referencePath?: string } {
  const { files } = trainer.state;
  return { lossDir: files.losses, ...(trainer.input.spec.round?.custom?.reference ? { referencePath: files.referenceLogprobs } : {}) };
}

/** The loss function's loss and metrics on the eval set under the session's current weights. */
async function evaluateCustomLoss(trainer: RoundTrainer, label: 'baseline' | 'trained') {
  const evaluation = await trainer.activities.onTrainer.evaluateCustomLoss({ ...trainer.phaseInput(), label, ...customFiles(trainer) });
  trainer.state.addUsage(evaluation.usage);
  return evaluation;
}

import type { RoundActivities } from './activities';
import type { RoundInput, RoundResult, SegmentInput, SegmentOutcome } from './contract';
import type { RoundTrainer } from './trainer';

/**
 * What changes with the round kind (`spec.round.kind`): how the round is measured before and after training, and
 * what a training segment is. Everything else (lease, segments' protocol, checkpoints, cleanup) is the same.
 *   sft   segments of cross-entropy steps; baseline/trained = eval loss; accuracy from sampled answers.
 *   grpo  segments of sample-groups → rewards → policy-gradient step → weights sync; a frozen reference session
 *         when the loss has a KL penalty; accuracy from sampled answers.
 *   dpo   reference logprobs of every pair first (kept in a file), then segments of forward → DPO gradients →
 *         custom forward-backward → optim step; baseline/trained = eval DPO loss; accuracy = preference accuracy.
 */
export interface RoundKind {
  /** A frozen second session holding the starting weights (GRPO's KL reference). */
  referenceSession(input: RoundInput): boolean;
  baseline(trainer: RoundTrainer): Promise<void>;
  segment(activities: RoundActivities['segments'], trainer: RoundTrainer, segment: SegmentInput): Promise<SegmentOutcome>;
  /** After the sampler weights are saved: sample, score and measure the trained weights; sets the result's figures. */
  evaluate(trainer: RoundTrainer): Promise<void>;
}

/** SFT and GRPO: loss of the eval answers before and after, accuracy of sampled answers (and of the pool). */
const sampled: Pick<RoundKind, 'baseline' | 'evaluate'> = {
  async baseline(trainer) {
    const baseline = await trainer.activities.onTrainer.measureLoss({ ...trainer.phaseInput(), label: 'baseline', which: 'eval' });
    trainer.state.addUsage(baseline.usage);
    trainer.state.progress.baselineLoss = trainer.state.result.baselineLoss = baseline.perToken;
  },
  async evaluate(trainer) {
    const { state, input } = trainer;
    const result = state.result;
    // Eval loss only (an sft round's `evaluation.sampleAnswers: false`): its trainer has no generator to sample on.
    if (input.spec.evaluation.sampleAnswers !== false) await sampleAndScoreAll(trainer);
    await state.tell('evaluating');
    const trained = await trainer.activities.onTrainer.measureLoss({ ...trainer.phaseInput(), label: 'trained', which: 'eval' });
    state.addUsage(trained.usage);
    result.trainedLoss = trained.perToken;
  },
};

/** The trained weights' sampled answers, scored: the eval set's (the round's accuracy), the pool's, the test set's. */
async function sampleAndScoreAll(trainer: RoundTrainer): Promise<void> {
  const { state, input } = trainer;
  const result = state.result;
  await state.tell('sampling');
  const evaluationsPath = state.files.evaluations;
  const scored = await trainer.activities.onTrainer.sampleAndScore({
    ...trainer.phaseInput(),
    outputPath: evaluationsPath,
    label: 'sample',
  });
  state.addUsage(scored.usage);
  result.accuracy = scored.accuracy;
  if (scored.passAtK) result.passAtK = scored.passAtK;
  result.evaluationsPath = evaluationsPath;
  if (input.pool) {
    const poolEvaluationsPath = state.files.poolEvaluations;
    const pool = await trainer.activities.onTrainer.sampleAndScore({
      ...trainer.phaseInput(),
      outputPath: poolEvaluationsPath,
      label: 'pool',
      dataset: input.pool,
    });
    state.addUsage(pool.usage);
    result.poolEvaluationsPath = poolEvaluationsPath;
    result.poolAccuracy = pool.accuracy;
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
    result.test = {
      accuracy: test.accuracy,
      rows: test.total,
      ...(test.sha256 ? { sha256: test.sha256 } : {}),
      evaluationsPath: testEvaluationsPath,
    };
  }
}

export const ROUND_KINDS: Record<NonNullable<RoundResult['kind']>, RoundKind> = {
  sft: {
    ...sampled,
    referenceSession: () => false,
    segment: (segments, _run, segment) => segments.trainSegment(segment),
  },
  grpo: {
    ...sampled,
    referenceSession: (input) => Boolean(input.spec.round?.grpo?.reference),
    segment: (segments, trainer, segment) =>
      segments.trainGrpoSegment({
        ...segment,
        samplesDir: trainer.state.files.samples(trainer.lineage),
        referenceSessionId: trainer.referenceSessionId,
        ...(trainer.input.spec.round?.grpo?.reward?.kind === 'python' ? { rewardsDir: trainer.state.files.rewards } : {}),
        ...(trainer.input.spec.round?.grpo?.environment ? { episodesDir: trainer.state.files.episodes } : {}),
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
      const result = trainer.state.result;
      trainer.state.progress.baselineLoss = result.baselineLoss = baseline.loss;
      result.baselineAccuracy = baseline.accuracy;
      result.baselineMargin = baseline.meanMargin;
    },
    segment: (segments, trainer, segment) => segments.trainDpoSegment({ ...segment, referencePath: trainer.state.files.referenceLogprobs }),
    async evaluate(trainer) {
      await trainer.state.tell('evaluating');
      const evaluationsPath = trainer.state.files.evaluations;
      const trained = await trainer.activities.onTrainer.evaluateDpo({
        ...trainer.phaseInput(),
        label: 'trained',
        referencePath: trainer.state.files.referenceLogprobs,
        outputPath: evaluationsPath,
      });
      const result = trainer.state.result;
      trainer.state.addUsage(trained.usage);
      result.evaluationsPath = evaluationsPath;
      result.accuracy = trained.accuracy;
      result.trainedMargin = trained.meanMargin;
      result.trainedLoss = trained.loss;
    },
  },
};

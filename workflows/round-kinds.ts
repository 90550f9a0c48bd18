import type { TokenUsage } from '../config/rules/usage';
import type { RoundActivities } from './round-activities';
import type { RoundData, RoundInput, RoundResult, SegmentInput, TrainingCheckpoint } from './round-contract';
import type { RoundState } from './round-state';

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
  baseline(run: KindRun, stepOffset: number): Promise<void>;
  segment(activities: RoundActivities['segments'], run: KindRun, segment: SegmentInput): Promise<SegmentOutcome>;
  /** After the sampler weights are saved: sample, score and measure the trained weights; sets the result's figures. */
  evaluate(run: KindRun): Promise<void>;
}

/** What a kind's steps work with: the round's input, state, activities and current session. */
export interface KindRun {
  input: RoundInput;
  state: RoundState;
  activities: RoundActivities;
  data: RoundData;
  sessionId: string;
  referenceSessionId?: string;
  /** Rollbacks so far: operations' keys carry it, so a provider never hands back a failed lineage's records. */
  lineage: number;
}

/** What any kind's training segment reports. */
export interface SegmentOutcome {
  cursor: { step: number };
  checkpoints?: TrainingCheckpoint[];
  latestLoss?: number;
  latestReward?: number;
  firstReward?: number;
  latestMargin?: number;
  usage?: TokenUsage;
}

const roundArgs = (run: KindRun) => ({
  campaignId: run.input.campaignId,
  round: run.input.round,
  spec: run.input.spec,
  data: run.data,
  sessionId: run.sessionId,
  lineage: run.lineage || undefined,
});

/** SFT and GRPO: loss of the eval answers before and after, accuracy of sampled answers (and of the pool). */
const sampled: Pick<RoundKind, 'baseline' | 'evaluate'> = {
  async baseline(run) {
    const baseline = await run.activities.onTrainer.measureLoss({ ...roundArgs(run), label: 'baseline', which: 'eval' });
    run.state.addUsage(baseline.usage);
    run.state.progress.baselineLoss = run.state.result.baselineLoss = baseline.perToken;
  },
  async evaluate(run) {
    const { state, input } = run;
    const result = state.result;
    await state.tell('sampling');
    const evaluationsPath = state.file('evaluations.json');
    const scored = await run.activities.onTrainer.sampleAndScore({ ...roundArgs(run), outputPath: evaluationsPath, label: 'sample' });
    state.addUsage(scored.usage);
    result.accuracy = scored.accuracy;
    result.evaluationsPath = evaluationsPath;
    if (input.pool) {
      const poolEvaluationsPath = state.file('pool-evaluations.json');
      const pool = await run.activities.onTrainer.sampleAndScore({
        ...roundArgs(run),
        outputPath: poolEvaluationsPath,
        label: 'pool',
        dataset: input.pool,
      });
      state.addUsage(pool.usage);
      result.poolEvaluationsPath = poolEvaluationsPath;
      result.poolAccuracy = pool.accuracy;
    }
    await state.tell('evaluating');
    const trained = await run.activities.onTrainer.measureLoss({ ...roundArgs(run), label: 'trained', which: 'eval' });
    state.addUsage(trained.usage);
    result.trainedLoss = trained.perToken;
  },
};

export const ROUND_KINDS: Record<NonNullable<RoundResult['kind']>, RoundKind> = {
  sft: {
    ...sampled,
    referenceSession: () => false,
    segment: (segments, _run, segment) => segments.trainSegment(segment),
  },
  grpo: {
    ...sampled,
    referenceSession: (input) => Boolean(input.spec.round?.grpo?.reference),
    segment: (segments, run, segment) =>
      segments.trainGrpoSegment({
        ...segment,
        samplesDir: run.state.file(run.lineage ? `samples.L${run.lineage}` : 'samples'),
        referenceSessionId: run.referenceSessionId,
      }),
  },
  dpo: {
    referenceSession: () => false,
    async baseline(run, stepOffset) {
      const referencePath = run.state.file('reference-logprobs.json');
      const reference = await run.activities.onTrainer.computeDpoReference({ ...roundArgs(run), stepOffset, outputPath: referencePath });
      const baseline = await run.activities.onTrainer.evaluateDpo({ ...roundArgs(run), label: 'baseline', referencePath });
      run.state.addUsage(reference.usage);
      run.state.addUsage(baseline.usage);
      const result = run.state.result;
      run.state.progress.baselineLoss = result.baselineLoss = baseline.loss;
      result.baselineAccuracy = baseline.accuracy;
      result.baselineMargin = baseline.meanMargin;
    },
    segment: (segments, run, segment) => segments.trainDpoSegment({ ...segment, referencePath: run.state.file('reference-logprobs.json') }),
    async evaluate(run) {
      await run.state.tell('evaluating');
      const evaluationsPath = run.state.file('evaluations.json');
      const trained = await run.activities.onTrainer.evaluateDpo({
        ...roundArgs(run),
        label: 'trained',
        referencePath: run.state.file('reference-logprobs.json'),
        outputPath: evaluationsPath,
      });
      const result = run.state.result;
      run.state.addUsage(trained.usage);
      result.evaluationsPath = evaluationsPath;
      result.accuracy = trained.accuracy;
      result.trainedMargin = trained.meanMargin;
      result.trainedLoss = trained.loss;
    },
  },
};

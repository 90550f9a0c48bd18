import { meteredProvider } from './usage';
import { Context } from '@temporalio/activity';
import { learningRateAt } from '../config/rules/schedule';
import { isRecoverableFailure, RoundhouseFailure } from '../config/rules/failures';
import { ProviderError } from '../providers/errors';
import type { AdamParams, ForwardResult, OperationHandle, OptimStepResult, TrainingProvider } from '../providers/types';
import type { RoundSpec, SegmentInput, SegmentResult, TrainingCheckpoint } from '../workflows/round/contract';
import type { ActivityDeps } from './deps';
import { providerFailureType } from './failures';
import { lineageParts, roundKey } from '../config/rules/keys';
import { recordLatestLoss, recordOptimizerSteps } from './metrics';
import { HeartbeatPacer } from './heartbeat-pacer';
import { lossPerTokenOf, StepRecords, type StepRecord } from './step-records';
import { trackSteps } from './tracking';

/**
 * The one segment driver: where a training step is submitted and confirmed, for every round kind. A segment trains
 * from the workflow's cursor until its step or time bound; each kind (sft.ts, grpo.ts, dpo.ts) supplies only what
 * its step's forward-backward is and what its record says. The driver owns the protocol:
 *   - the start check against the trainer's own step counter (never train over a mismatch);
 *   - steps the trainer applied but no attempt recorded are recorded from their keyed (deduplicated) operations;
 *   - forward_backward and optim_step submitted back to back (pipelined up to the kind's depth), keys from
 *     business identity, so a retried attempt gets the original operations back;
 *   - the cursor and operations in flight in every heartbeat (the next attempt re-polls them);
 *   - a deadline, and a clean stop when the workflow interrupts the segment (pause, budget) or the worker drains;
 *   - the optimizer step checked against the round's step; step records written atomically; metrics.
 */

/** What a round kind supplies to the driver: what its step is. */
export interface StepKind<R extends StepRecord, F = ForwardResult> {
  /** How many steps may be in flight at once (1 for kinds whose next step needs this one's weights). */
  depth: number;
  /** Before the first step, with the round step the trainer is at (GRPO: the generators get those weights). */
  begin?(applied: number): Promise<void>;
  /**
   * Submits a step's forward-backward under its business key: the same request on every attempt. With gradient
   * accumulation (`training.accumulate`), its passes, in order: the optimizer step applies their summed gradients.
   */
  submitForwardBackward(step: number): Promise<OperationHandle<F> | OperationHandle<F>[]>;
  /** Right after a step's optimizer step is submitted (GRPO: draw the next steps' groups meanwhile). */
  submitted?(step: number): void;
  /**
   * After a step is confirmed applied (GRPO: sync the generators to the new weights). `continues`: whether this
   * segment is about to submit the next step (not at its end, stopping, or due a checkpoint).
   */
  confirmed?(step: number, continues: boolean): Promise<void>;
  /**
   * A confirmed step's record, from its forward-backward's result and the step's durable inputs; `morePasses`: the
   * results of its accumulated passes after the first.
   */
  record(step: number, forwardBackward: F, morePasses: F[]): Promise<R> | R;
  /** Before the segment returns (GRPO: let draws started ahead finish). */
  end?(): Promise<void>;
}

/** What the driver hands a kind: the provider, the key of a step's operation, and the signal that ends waits. */
export interface SegmentContext {
  provider: TrainingProvider;
  key(...parts: (string | number)[]): string;
  signal: AbortSignal;
}

/** Heartbeat details of a training segment: the resume cursor and the operations in flight. */
interface SegmentHeartbeat<F> {
  step: number;
  inFlight: InFlightStep<F>[];
  checkpoints?: TrainingCheckpoint[];
}

interface InFlightStep<F> {
  step: number;
  fb: OperationHandle<F>;
  /** Accumulated passes after the first (absent from heartbeats written before `training.accumulate`). */
  more?: OperationHandle<F>[];
  opt: OperationHandle<OptimStepResult>;
}

/** A step's forward-backward passes as the first and the rest. */
function passesOf<F>(handles: OperationHandle<F> | OperationHandle<F>[]): { fb: OperationHandle<F>; more?: OperationHandle<F>[] } {
  if (!Array.isArray(handles)) return { fb: handles };
  const [fb, ...more] = handles;
  return more.length ? { fb: fb!, more } : { fb: fb! };
}

/** Trains one segment of a kind's steps; returns the cursor (for the workflow) and the confirmed steps' records. */
export async function trainSegmentOf<R extends StepRecord, F = ForwardResult>(
  deps: ActivityDeps,
  input: SegmentInput,
  kindFor: (ctx: SegmentContext) => Promise<StepKind<R, F>>,
): Promise<{ result: SegmentResult; records: R[] }> {
  const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
  const provider = meter.provider;
  const t = input.spec.training;
  const lineage = input.lineage ?? 0;
  const stopper = segmentStopper(deps);
  const key = (...parts: (string | number)[]) => roundKey(input.campaignId, input.round, ...lineageParts(lineage), ...parts);
  const ctx: SegmentContext = { provider, key, signal: stopper.signal };
  const previous = Context.current().info.heartbeatDetails as SegmentHeartbeat<F> | undefined;
  const checkpoints = new RollingCheckpoints(provider, input, key, previous?.checkpoints);
  let confirmed = input.cursor.step;
  // Each heartbeat carries the cursor, and the server's answer is how a pause or a budget reaches the segment, so they
  // go out as the segment moves, within the worker's heartbeat budget (activities/heartbeat-pacer.ts).
  const beat = new HeartbeatPacer<SegmentHeartbeat<F>>();
  try {
    const kind = await kindFor(ctx);
    const { applied, maxStep } = await segmentStart(provider, input);
    const records = await StepRecords.load<R>(input.stepsDir, lineage);
    const metricTags = { provider: input.spec.provider.kind, campaign_name: input.spec.name };

    await kind.begin?.(applied);
    // Steps the trainer applied whose attempt died before recording them: their keyed forward-backward returns the
    // original operation (nothing is applied twice), and its result completes the record.
    for (const step of records.missing(input.cursor.step, applied)) {
      const passes = passesOf(await kind.submitForwardBackward(step));
      const fb = await provider.awaitOperation(passes.fb, { signal: stopper.signal });
      const more = await Promise.all((passes.more ?? []).map((h) => provider.awaitOperation(h, { signal: stopper.signal })));
      records.add(await kind.record(step, fb, more));
    }

    confirmed = applied;
    const inFlight = previous?.inFlight?.filter((f) => f.step >= confirmed) ?? [];
    let next = inFlight.length ? inFlight[inFlight.length - 1]!.step + 1 : confirmed;
    const deadline = Date.now() + t.segmentSeconds * 1000;
    const firstSubmission = next;
    /** Why no further step is submitted: the next one would cross the dollar budget (activities/usage.ts). */
    let budgetReached: string | undefined;
    const report = () =>
      beat.report({ step: confirmed, inFlight: [...inFlight], checkpoints: checkpoints.saved } satisfies SegmentHeartbeat<F>);
    report();

    try {
      while (confirmed < maxStep) {
        // A checkpoint that is due waits for the pipeline to drain, so it holds only confirmed steps.
        const submitting = () =>
          next < maxStep && inFlight.length < kind.depth && !stopper.stopping() && !checkpoints.due(confirmed) && !budgetReached;
        // Past the deadline nothing more is submitted (the steps in flight land, then the segment ends), except a
        // segment's very first step: every segment makes progress.
        while (submitting() && (Date.now() < deadline || next === firstSubmission)) {
          let submitted: Awaited<ReturnType<typeof kind.submitForwardBackward>>;
          try {
            submitted = await kind.submitForwardBackward(next);
          } catch (err) {
            if (!(err instanceof RoundhouseFailure && err.type === 'BudgetReached')) throw err;
            budgetReached = err.message; // the steps in flight land; the round stops at the last of them
            break;
          }
          const passes = passesOf(submitted);
          const opt = await provider.submitOptimStep(
            input.sessionId,
            key(`s${next}`, 'optim-step'),
            adamAt(t, learningRateAt(next, input.totalSteps, t.learningRate, t.lrSchedule)),
          );
          kind.submitted?.(next);
          inFlight.push({ step: next, ...passes, opt });
          next += 1;
          report();
        }
        if (inFlight.length === 0) {
          if (!checkpoints.due(confirmed) || stopper.stopping() || budgetReached) break; // out of time, interrupted, draining, or spent
          await checkpoints.save(confirmed, stopper.signal);
          report();
          if (Date.now() >= deadline) break;
          continue;
        }
        const head = inFlight[0]!;
        const fb = await provider.awaitOperation(head.fb, { signal: stopper.signal });
        const more = await Promise.all((head.more ?? []).map((h) => provider.awaitOperation(h, { signal: stopper.signal })));
        checkOptimStep(await provider.awaitOperation(head.opt, { signal: stopper.signal }), head.step, input.stepOffset);
        inFlight.shift();
        confirmed = head.step + 1;
        await kind.confirmed?.(
          head.step,
          next < maxStep && Date.now() < deadline && !stopper.stopping() && !checkpoints.due(confirmed) && !budgetReached,
        );
        const record = records.add(await kind.record(head.step, fb, more));
        if (records.due()) await trackSteps(input, await records.flush()); // long segments: records and tracker stay current
        report();
        recordOptimizerSteps(1, metricTags);
        recordLatestLoss(lossPerTokenOf(record), metricTags);
      }
      await kind.end?.();
    } finally {
      // What was confirmed stays recorded even when the segment fails or is cut short; then the tracker logs it.
      const flushed = await records.flush();
      await trackSteps(input, flushed);
      beat.flush();
    }
    const confirmedRecords = records.since(input.cursor.step);
    return {
      result: {
        cursor: { step: confirmed },
        ...lossSummary(confirmedRecords),
        checkpoints: checkpoints.saved,
        usage: meter.usage(),
        ...(budgetReached ? { budgetReached } : {}),
      },
      records: confirmedRecords,
    };
  } catch (err) {
    // The workflow rolls back from what this segment knew: the checkpoints it saved and the step it reached.
    throw recoverableFailure(err, { step: confirmed, lineage, checkpoints: checkpoints.saved });
  } finally {
    beat.stop();
  }
}

/** A failure the round recovers from by rolling back, with what it needs to do so; other errors pass unchanged. */
function recoverableFailure(err: unknown, details: Record<string, unknown>): unknown {
  if (!(err instanceof ProviderError)) return err;
  const type = providerFailureType(err);
  return isRecoverableFailure(type) ? new RoundhouseFailure(type, err.message, { ...details, code: err.providerCode ?? err.code }) : err;
}

/**
 * The rolling training checkpoints a segment saves (`training.checkpointEvery`): after so many steps or minutes since
 * the round's latest one, on a drained pipeline, under the lineage's keys.
 */
class RollingCheckpoints {
  readonly saved: TrainingCheckpoint[];
  private readonly every: { steps?: number; minutes?: number };
  private last: { step: number; savedAtMs: number };

  constructor(
    private readonly provider: TrainingProvider,
    private readonly input: SegmentInput,
    private readonly key: (...parts: (string | number)[]) => string,
    earlier: TrainingCheckpoint[] | undefined,
  ) {
    this.saved = [...(earlier ?? [])];
    this.every = input.spec.training.checkpointEvery ?? { minutes: 5 };
    this.last = this.saved[this.saved.length - 1] ?? input.lastCheckpoint ?? { step: input.cursor.step, savedAtMs: Date.now() };
  }

  /** Whether a checkpoint is due at this confirmed step (never at the round's end: the round saves its final one). */
  due(confirmed: number): boolean {
    if (confirmed <= this.last.step || confirmed >= this.input.totalSteps) return false;
    const { steps, minutes } = this.every;
    return (
      (steps !== undefined && confirmed - this.last.step >= steps) ||
      (minutes !== undefined && Date.now() - this.last.savedAtMs >= minutes * 60_000)
    );
  }

  async save(step: number, signal: AbortSignal): Promise<void> {
    const handle = await this.provider.submitTrainingCheckpoint(this.input.sessionId, this.key('checkpoint', `s${step}`));
    const saved = await this.provider.awaitOperation(handle, { signal });
    if (saved.step - this.input.stepOffset !== step) {
      throw new RoundhouseFailure(
        'StepCounterMismatch',
        `checkpoint at round step ${step} reported provider step ${saved.step} (offset ${this.input.stepOffset})`,
      );
    }
    this.last = { step, savedAtMs: Date.now() };
    this.saved.push({ checkpointId: saved.checkpointId, step, savedAtMs: this.last.savedAtMs, lineage: this.input.lineage ?? 0 });
  }
}

/**
 * Where a training segment starts, checked against the trainer: the session must be running, and its step counter
 * must sit inside what this segment may have applied: never behind the cursor (progress lost) and never past the
 * segment's end (someone else trained this session). `applied` is that counter in round steps.
 */
export async function segmentStart(provider: TrainingProvider, input: SegmentInput): Promise<{ applied: number; maxStep: number }> {
  // A segment ends where an evaluation during training is due (`evaluation.every`): the workflow evaluates there.
  const every = input.spec.evaluation.every;
  const nextEvaluation = every ? (Math.floor(input.cursor.step / every) + 1) * every : Infinity;
  const maxStep = Math.min(input.totalSteps, input.cursor.step + input.spec.training.segmentSteps, nextEvaluation);
  const session = await provider.getSession(input.sessionId);
  if (session.state !== 'running') {
    throw new ProviderError('SESSION_NOT_ACTIVE', 'needs-reconcile', `training session ${input.sessionId} is ${session.state}`, {
      providerCode: 'SESSION_NOT_ACTIVE',
    });
  }
  const applied = session.step - input.stepOffset;
  if (applied < input.cursor.step || applied > maxStep) {
    throw new RoundhouseFailure(
      'StepCounterMismatch',
      `session ${input.sessionId} is at round step ${applied} but the segment starts at ${input.cursor.step} and ends by ${maxStep}; refusing to train over it`,
    );
  }
  return { applied, maxStep };
}

/**
 * How a training segment stops early and cleanly: it submits no new step once the worker drains (SIGTERM) or the
 * workflow interrupts the segment (a cancellation: pause, budget, stop), and it gives the steps already in flight
 * `drainMs` to land before their waits are aborted. It then returns its cursor like any segment end.
 */
export function segmentStopper(deps: ActivityDeps, drainMs = 30_000): { stopping(): boolean; signal: AbortSignal } {
  const cancelled = Context.current().cancellationSignal;
  const window = new AbortController();
  const startWindow = () => setTimeout(() => window.abort(cancelled.reason), drainMs).unref();
  if (cancelled.aborted) startWindow();
  else cancelled.addEventListener('abort', startWindow, { once: true });
  return { stopping: () => cancelled.aborted || (deps.draining?.() ?? false), signal: window.signal };
}

/** What a segment says of the steps it confirmed: how many, and the loss per trained token (latest and mean). */
export function lossSummary(steps: StepRecord[]): Omit<SegmentResult, 'cursor'> {
  const last = steps[steps.length - 1];
  return {
    stepsApplied: steps.length,
    latestLoss: last ? lossPerTokenOf(last) : undefined,
    meanLoss: steps.length ? steps.reduce((a, s) => a + lossPerTokenOf(s), 0) / steps.length : undefined,
  };
}

/** The optimizer step's AdamW parameters at a learning rate. */
export function adamAt(t: RoundSpec['training'], learningRate: number): AdamParams {
  return {
    learningRate,
    beta1: t.adam.beta1,
    beta2: t.adam.beta2,
    eps: t.adam.eps,
    weightDecay: t.adam.weightDecay,
    gradClipNorm: t.adam.gradClipNorm,
  };
}

/** Fails the segment if an optimizer step did not land where the round expects (someone else stepped the session). */
export function checkOptimStep(result: OptimStepResult, step: number, stepOffset: number): void {
  if (result.step - stepOffset !== step + 1) {
    throw new RoundhouseFailure(
      'StepCounterMismatch',
      `optim_step for round step ${step + 1} reported provider step ${result.step} (offset ${stepOffset})`,
    );
  }
}

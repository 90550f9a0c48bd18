import { Context } from '@temporalio/activity';
import { ActivityFailure, ApplicationFailure, TimeoutFailure, WorkflowIdReusePolicy } from '@temporalio/common';
import { WorkflowExecutionAlreadyStartedError, WorkflowFailedError } from '@temporalio/client';
import { isFailureType, RoundhouseFailure } from '../config/rules/failures';
import { writeJsonAtomic } from './files';
import { PYTHON_ACTIVITIES, pythonFailureType, type PythonCall, type PythonRole } from '../config/rules/python-calls';
import type { NextDataRequest, NextDataResult, PythonCallInput, ScoreItem, ScoreResult } from '../workflows/python/contract';

/**
 * Calling the user's Python functions from an activity. An activity cannot run activities, so each batch is a small
 * workflow (`pythonCallWorkflow`) on this worker's task queue that runs the Python worker's activity; its id is the
 * batch's business identity (campaign, round, lineage, step, what), so a retried activity attaches to the call its
 * first attempt started — running or completed — and never starts a second while it runs or after it answered. The Python side records each result in
 * the store under the sample's key, so a retried Python attempt computes only what was not recorded.
 */

/** Starts the call under `workflowId` (or finds it) and waits for its result; `signal` abandons the wait only. */
export async function callPython<T>(workflowId: string, input: PythonCallInput, signal?: AbortSignal): Promise<T> {
  const context = Context.current();
  const client = context.client;
  try {
    await client.workflow.start('pythonCallWorkflow', {
      workflowId,
      taskQueue: context.info.taskQueue,
      args: [input],
      // A completed call keeps its id: the retry reads its result instead of calling the function again. One that
      // failed, timed out or was cancelled while nobody waited (its round paused longer than its retries last) is
      // started afresh under the same id, so a resumed round gets a working call, never that failure.
      workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
    });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
  const result = client.workflow.getHandle(workflowId).result() as Promise<T>;
  try {
    if (!signal) return await result;
    return await new Promise<T>((resolve, reject) => {
      const abandon = () => reject(signal.reason instanceof Error ? signal.reason : new Error('cancelled'));
      if (signal.aborted) return abandon();
      signal.addEventListener('abort', abandon, { once: true });
      result.then(resolve, reject).finally(() => signal.removeEventListener('abort', abandon));
    });
  } catch (err) {
    throw pythonFailure(err, input);
  }
}

/** A failed call as the round's failure: the Python side's type, a worker that never came, or the role's failure. */
function pythonFailure(err: unknown, input: PythonCallInput): unknown {
  if (!(err instanceof WorkflowFailedError)) return err;
  const { name, taskQueue, retry } = input.call;
  const what = `${input.role} '${name}' on task queue '${taskQueue}'`;
  const activity = err.cause instanceof ActivityFailure ? err.cause : undefined;
  const cause = activity?.cause ?? err.cause;
  if (cause instanceof TimeoutFailure) {
    if (cause.timeoutType === 'SCHEDULE_TO_START')
      return new RoundhouseFailure(
        'PythonWorkerUnavailable',
        `${what}: no Python worker took the call within ${input.call.workerWaitSeconds} s`,
      );
    return new RoundhouseFailure(
      pythonFailureType(input.role),
      `${what}: timed out (${cause.timeoutType ?? 'timeout'}) on its last of ${retry.maxAttempts} attempts`,
    );
  }
  if (cause instanceof ApplicationFailure) {
    const type = cause.type && isFailureType(cause.type) ? cause.type : pythonFailureType(input.role);
    const attempts = cause.nonRetryable ? '' : ` (after ${retry.maxAttempts} attempts)`;
    return new RoundhouseFailure(type, `${cause.message}${attempts}`, (cause.details?.[0] as Record<string, unknown>) ?? {});
  }
  return new RoundhouseFailure(pythonFailureType(input.role), `${what}: ${(cause as Error | undefined)?.message ?? err.message}`);
}

/**
 * Scores a batch on the Python worker: the items are written to the store (the history carries their location), and
 * each result is recorded under `<recordsDir>/<item key>.json`. Returns a score, or null (unscorable), per item.
 */
export async function scoreOnPython(options: {
  role: Extract<PythonRole, 'reward' | 'scorer'>;
  call: PythonCall;
  workflowId: string;
  itemsLocation: string;
  recordsDir: string;
  items: ScoreItem[];
  signal?: AbortSignal;
}): Promise<ScoreResult> {
  if (options.items.length === 0) return { values: [], computed: 0, reused: 0, unscorable: 0 };
  await writeJsonAtomic(options.itemsLocation, { items: options.items });
  const result = await callPython<ScoreResult>(
    options.workflowId,
    {
      call: options.call,
      role: options.role,
      activity: options.role === 'reward' ? PYTHON_ACTIVITIES.rewards : PYTHON_ACTIVITIES.scores,
      request: {
        function: options.call.name,
        items: options.itemsLocation,
        records: options.recordsDir,
        concurrency: options.call.concurrency,
      },
    },
    options.signal,
  );
  if (result.values.length !== options.items.length)
    throw new RoundhouseFailure(
      pythonFailureType(options.role),
      `${options.role} '${options.call.name}': ${result.values.length} results for ${options.items.length} samples`,
    );
  return result;
}

/** The next round's rows chosen by a Python data policy, written to `output` (once: a retry reuses them). */
export async function nextDataOnPython(
  call: PythonCall,
  workflowId: string,
  request: Omit<NextDataRequest, 'function'>,
): Promise<NextDataResult> {
  return callPython<NextDataResult>(workflowId, {
    call,
    role: 'data_policy',
    activity: PYTHON_ACTIVITIES.nextData,
    request: { function: call.name, ...request },
  });
}

/** One datum of a loss batch as the Python side reads it (python/src/roundhouse/loss.py). */
export interface LossBatchDatum {
  /** Its row's index in the batch's `rows`. */
  row: number;
  /** Its completion's name: `answer`, `chosen`, `rejected`, or a key of the row's `completions`. */
  completion: string;
  /** The trainer's logprob of each target token (prompt tokens included), and 1 on the trained (completion) tokens. */
  logprobs: number[];
  weights: number[];
  advantages?: number[];
  sampler_logprobs?: number[];
  /** `round.custom.reference: start`: the starting weights' logprob of each target token. */
  reference_logprobs?: number[];
}

/** A loss call's batch, written to the store (the history carries its location). */
export interface LossBatch {
  /** The 0-based optimizer step (train), or null (an evaluation). */
  step: number | null;
  mode: 'train' | 'eval';
  rows: Record<string, unknown>[];
  datums: LossBatchDatum[];
  /** For the failure's message: the 1-based step, the lineage, the evaluation's label. */
  context: Record<string, number | string>;
}

/** What the `roundhouse.loss` activity returns: numbers and a location (the gradients stay in the store). */
export interface LossCallResult {
  record: string;
  loss: number;
  metrics: Record<string, number>;
  reused: boolean;
  datums: number;
}

/** A loss call's record in the store: what the function returned (train mode: with its gradients). */
export interface LossRecord {
  digest: string;
  function: string;
  mode: 'train' | 'eval';
  loss: number;
  metrics: Record<string, number>;
  gradients?: number[][];
}

/**
 * The user's loss function on a Python worker over one batch: the batch goes by store location, the result is recorded
 * at `recordLocation` under the step's identity, so a retried segment, a replayed activity or a restarted call reads
 * the recorded gradients back instead of calling the function again.
 */
export async function lossOnPython(options: {
  call: PythonCall;
  workflowId: string;
  batchLocation: string;
  recordLocation: string;
  batch: LossBatch;
  signal?: AbortSignal;
}): Promise<LossCallResult> {
  await writeJsonAtomic(options.batchLocation, options.batch);
  return callPython<LossCallResult>(
    options.workflowId,
    {
      call: options.call,
      role: 'loss',
      activity: PYTHON_ACTIVITIES.loss,
      request: { function: options.call.name, batch: options.batchLocation, record: options.recordLocation, mode: options.batch.mode },
    },
    options.signal,
  );
}

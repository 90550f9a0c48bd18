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

import { z } from 'zod';
import { PYTHON_CALL_DEFAULTS } from '../rules/python-defaults';

/** Field types the spec's blocks share: counts, shares, durations, a Tinker TTL, and a call to a Python function. */

export const positiveInt = z.number().int().min(1);

/** Why a value is not a share in [0, 1], if it is not; a percentage such as `60` is shown as the fraction meant. */
export function fractionProblem(value: number): string | undefined {
  if (value >= 0 && value <= 1) return undefined;
  return value > 1 && value <= 100 ? `is a fraction: ${value / 100} (not ${value}%)` : `is a fraction between 0 and 1 (it is ${value})`;
}

/** A call to the user's function on a Python worker (python/: `python -m roundhouse worker my_env.py`). */
export const PythonRetrySchema = z
  .object({
    /** Attempts of a batch in all (what earlier attempts recorded is kept): past them the step fails, never scores 0. */
    maxAttempts: positiveInt.max(100).default(PYTHON_CALL_DEFAULTS.retry.maxAttempts),
    initialIntervalSeconds: z.number().positive().max(3600).default(PYTHON_CALL_DEFAULTS.retry.initialIntervalSeconds),
    maxIntervalSeconds: z.number().positive().max(86_400).default(PYTHON_CALL_DEFAULTS.retry.maxIntervalSeconds),
    backoff: z.number().min(1).max(10).default(PYTHON_CALL_DEFAULTS.retry.backoff),
  })
  .strict();

/** A python call's fields as written (the bounds, no defaults): `rounds.nextData` takes them as they are. */
export const pythonCallBounds = {
  /** The function's registered name (`@roundhouse.reward`, `@roundhouse.scorer`, `@roundhouse.data_policy`). */
  name: z.string().trim().min(1).max(200),
  /** The task queue the Python worker polls (`--task-queue`). */
  taskQueue: z.string().trim().min(1).max(200),
  retry: PythonRetrySchema,
  /** One attempt's bound for a batch (a slow judge over many samples needs more). */
  timeoutSeconds: positiveInt.max(86_400),
  /** A Python worker that dies mid-batch is noticed after this long; the retry computes only what was not recorded. */
  heartbeatTimeoutSeconds: positiveInt.max(600),
  /** How long a call waits for a Python worker to take it (the check before provisioning, and every batch). */
  workerWaitSeconds: positiveInt.max(86_400),
  /** Samples scored at once on the worker (async functions concurrently; sync ones in threads). */
  concurrency: positiveInt.max(256),
};

export const pythonCallFields = {
  name: pythonCallBounds.name,
  taskQueue: pythonCallBounds.taskQueue,
  retry: pythonCallBounds.retry.default(PYTHON_CALL_DEFAULTS.retry),
  timeoutSeconds: pythonCallBounds.timeoutSeconds.default(PYTHON_CALL_DEFAULTS.timeoutSeconds),
  heartbeatTimeoutSeconds: pythonCallBounds.heartbeatTimeoutSeconds.default(PYTHON_CALL_DEFAULTS.heartbeatTimeoutSeconds),
  workerWaitSeconds: pythonCallBounds.workerWaitSeconds.default(PYTHON_CALL_DEFAULTS.workerWaitSeconds),
  concurrency: pythonCallBounds.concurrency.default(PYTHON_CALL_DEFAULTS.concurrency),
};

/** A block that names a python function only in one of its modes (`policy: python`, `kind: python`): the call's fields, optional. */
export const optionalPythonCallFields = {
  name: pythonCallBounds.name.optional(),
  taskQueue: pythonCallBounds.taskQueue.optional(),
  retry: pythonCallBounds.retry.optional(),
  timeoutSeconds: pythonCallBounds.timeoutSeconds.optional(),
  heartbeatTimeoutSeconds: pythonCallBounds.heartbeatTimeoutSeconds.optional(),
  workerWaitSeconds: pythonCallBounds.workerWaitSeconds.optional(),
};

const DURATION = /^\d+(\.\d+)?(s|m|h|d)$/;
const SECONDS_PER_UNIT = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `72h`, `30m`, `45s`, `2d` in seconds (unrounded). */
function durationSeconds(d: string): number {
  return Number(d.slice(0, -1)) * SECONDS_PER_UNIT[d.slice(-1) as keyof typeof SECONDS_PER_UNIT];
}

/** `72h`, `30m`, `45s`, `2d`: a duration, in milliseconds. */
export const durationMs = z
  .string()
  .regex(DURATION, 'a duration such as 45s, 30m, 72h or 7d')
  .transform((d) => Math.round(durationSeconds(d) * 1000))
  .refine((ms) => ms >= 1_000 && ms <= 365 * 86_400_000, 'between 1s and 365d');

/**
 * A Tinker checkpoint's TTL, in seconds: a number of seconds or a duration (`1h`, `30d`). Tinker's SDK documents
 * "between 1 hour (3600) and 10 years"; "the service refuses less" is #44's wording (the SDK checks nothing), so it
 * is refused here, before anything runs.
 */
export const checkpointTtlSeconds = z
  .union([
    z.number().int(),
    z
      .string()
      .regex(DURATION, 'seconds, or a duration such as 1h, 72h or 30d')
      .transform((d) => Math.round(durationSeconds(d))),
  ])
  .refine((s) => s >= 3600, "is below Tinker's minimum checkpoint TTL of 3600 s (1h)")
  .refine((s) => s <= 10 * 365 * 86_400, "is above Tinker's maximum checkpoint TTL of 10 years");

import { ActivityFailure, ApplicationFailure, proxyActivities, TimeoutFailure, type ActivityOptions } from '@temporalio/workflow';
import { PYTHON_ACTIVITIES, type PythonCall, type PythonCheck } from '../../config/rules/python-calls';
import type { DescribeRequest, DescribeResult, PythonCallInput } from './contract';

/**
 * The user's functions on a Python worker, called by name on its task queue (Temporal is polyglot: the Python
 * worker's activities are typed here only by their payloads, python-contract.ts).
 */

type PythonActivity = (request: unknown) => Promise<unknown>;

function activityOptions(call: PythonCall): ActivityOptions {
  return {
    taskQueue: call.taskQueue,
    // No worker on the queue: the call fails after this long (a schedule-to-start timeout is never retried).
    scheduleToStartTimeout: `${call.workerWaitSeconds} seconds`,
    startToCloseTimeout: `${call.timeoutSeconds} seconds`,
    heartbeatTimeout: `${call.heartbeatTimeoutSeconds} seconds`,
    retry: {
      maximumAttempts: call.retry.maxAttempts,
      initialInterval: `${call.retry.initialIntervalSeconds} seconds`,
      maximumInterval: `${call.retry.maxIntervalSeconds} seconds`,
      backoffCoefficient: call.retry.backoff,
      nonRetryableErrorTypes: ['InvalidInput'],
    },
  };
}

/**
 * One batch on the Python worker, as a workflow of its own: a training segment (an activity, which cannot run
 * activities) starts it under an id from the batch's business identity and waits for its result, so a retried
 * segment finds the same call, running or done, instead of starting another.
 */
export async function pythonCallWorkflow(input: PythonCallInput): Promise<unknown> {
  const activities = proxyActivities<Record<string, PythonActivity>>(activityOptions(input.call));
  return activities[input.activity]!(input.request);
}

/** The sandbox mode the described workers run, one per task queue when they differ. */
export function sandboxOf(described: DescribeResult[], queues: string[]): string | undefined {
  const modes = [...new Set(described.map((d) => d.sandbox))];
  if (modes.length <= 1) return modes[0];
  return described.map((d, i) => `${queues[i]}: ${d.sandbox}`).join('; ');
}

/** Whether a failure is a call that no worker took within its schedule-to-start timeout. */
function noWorkerTookIt(err: unknown): boolean {
  return err instanceof ActivityFailure && err.cause instanceof TimeoutFailure && err.cause.timeoutType === 'SCHEDULE_TO_START';
}

/**
 * Before anything is provisioned: each task queue's Python worker is asked whether the functions the spec names are
 * registered and can take their role's arguments. No worker within `workerWaitSeconds` → PythonWorkerUnavailable; a
 * missing or unfit function → InvalidInput naming the spec field. Nothing is retried past that: the spec or the
 * deployment is wrong.
 */
export async function checkPythonFunctions(checks: PythonCheck[]): Promise<DescribeResult[]> {
  const queues = [...new Set(checks.map((c) => c.call.taskQueue))];
  const described: DescribeResult[] = [];
  for (const taskQueue of queues) {
    const here = checks.filter((c) => c.call.taskQueue === taskQueue);
    const wait = Math.max(...here.map((c) => c.call.workerWaitSeconds));
    const describe = proxyActivities<Record<string, (r: DescribeRequest) => Promise<DescribeResult>>>({
      taskQueue,
      scheduleToStartTimeout: `${wait} seconds`,
      // Loading a verifiers environment with its args may fetch its dataset: minutes, not seconds.
      startToCloseTimeout: '10 minutes',
      retry: { maximumAttempts: 3, initialInterval: '1 second' },
    })[PYTHON_ACTIVITIES.describe]!;
    let result: DescribeResult;
    try {
      result = await describe({ functions: here.map((c) => ({ role: c.role, name: c.call.name, ...(c.args ? { args: c.args } : {}) })) });
    } catch (err) {
      if (!noWorkerTookIt(err)) throw err;
      throw ApplicationFailure.create({
        type: 'PythonWorkerUnavailable',
        nonRetryable: true,
        message:
          `${here.map((c) => c.field).join(', ')}: no Python worker polled task queue '${taskQueue}' within ${wait} s ` +
          `(start one: python -m roundhouse worker <your_file.py> --task-queue ${taskQueue})`,
      });
    }
    const problems = here.flatMap((check, i) => {
      const f = result.functions[i];
      return f && f.ok
        ? []
        : [`${check.field}.${f?.field ?? 'name'}: ${f?.problem ?? 'not described'} (task queue '${taskQueue}', worker ${result.worker})`];
    });
    if (problems.length) throw ApplicationFailure.create({ type: 'InvalidInput', nonRetryable: true, message: problems.join('; ') });
    described.push(result);
  }
  return described;
}

import os from 'node:os';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { WorkerVariable } from '../config/rules/preflight';

export interface WorkerDescription {
  pid: number;
  node: string;
  echo: string;
}

export async function describeWorker(greeting: string): Promise<WorkerDescription> {
  Context.current().log.info('preflight activity ran', { greeting });
  return { pid: process.pid, node: process.version, echo: greeting };
}

/**
 * Before the first round: the variables the spec names (`notify.webhookEnv`, `notify.secretEnv`) are set on this
 * worker, or WorkerEnvironmentMissing (not retried) names the field and the variable. Never their values.
 */
export async function checkWorkerEnvironment(needed: WorkerVariable[]): Promise<{ worker: string }> {
  const worker = `${os.hostname()}:${process.pid}`;
  const missing = needed.filter((v) => !process.env[v.name]);
  if (missing.length)
    throw ApplicationFailure.nonRetryable(
      missing.map((v) => `${v.field}: ${v.name} is not set on the worker (${worker}); set it there, or remove ${v.field}`).join('; '),
      'WorkerEnvironmentMissing',
    );
  return { worker };
}

import os from 'node:os';
import { Context } from '@temporalio/activity';
import { RoundhouseFailure } from '../config/rules/failures';
import type { WorkerVariable } from '../config/rules/preflight';
import { atBoundary } from './failures';

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
  return atBoundary(async () => {
    const worker = `${os.hostname()}:${process.pid}`;
    const missing = needed.filter((v) => !process.env[v.name]);
    if (missing.length)
      throw new RoundhouseFailure(
        'WorkerEnvironmentMissing',
        missing.map((v) => `${v.field}: ${v.name} is not set on the worker (${worker}); set it there, or remove ${v.field}`).join('; '),
      );
    return { worker };
  });
}

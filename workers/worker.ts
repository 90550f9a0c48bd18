import fs from 'node:fs';
import path from 'node:path';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities } from '../activities';
import { ProviderRegistry } from './providers';
import type { WorkerSettings } from '../config/worker-env';
import { packageRoot } from './temporal-server';

/** A prebuilt bundle (written by `npm run build`) spares the worker webpack at start-up. */
export function prebuiltBundlePath(): string {
  return path.join(packageRoot(), 'dist', 'workflow-bundle.js');
}

export function workflowSource(): Pick<WorkerOptions, 'workflowBundle' | 'workflowsPath'> {
  const bundle = prebuiltBundlePath();
  const explicit = process.env.ROUNDHOUSE_WORKFLOW_BUNDLE;
  if (explicit) return { workflowBundle: { codePath: explicit } };
  if (process.env.ROUNDHOUSE_PREBUILT_BUNDLE !== 'false' && fs.existsSync(bundle)) return { workflowBundle: { codePath: bundle } };
  return { workflowsPath: require.resolve('../workflows') };
}

export interface RoundhouseWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  /** Tests pass a bundle built once per file; otherwise the prebuilt bundle or the workflow sources. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  shutdownGraceTime?: WorkerOptions['shutdownGraceTime'];
  /** Providers for the activities; defaults to one built from the environment (state in stateDir). */
  providers?: ProviderRegistry;
  stateDir?: string;
  tuning?: WorkerSettings['tuning'];
}

export async function createRoundhouseWorker(options: RoundhouseWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue,
    activities: createActivities(options.providers ?? new ProviderRegistry({ stateDir: options.stateDir ?? '.roundhouse' })),
    ...(options.workflowBundle ? { workflowBundle: options.workflowBundle } : workflowSource()),
    shutdownGraceTime: options.shutdownGraceTime ?? options.tuning?.shutdownGraceMs ?? '20 seconds',
    ...(options.tuning?.maxConcurrentActivities !== undefined ? { maxConcurrentActivityTaskExecutions: options.tuning.maxConcurrentActivities } : {}),
    ...(options.tuning?.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: options.tuning.maxCachedWorkflows } : {}),
    ...(options.tuning?.stickyQueueTimeoutMs !== undefined ? { stickyQueueScheduleToStartTimeout: options.tuning.stickyQueueTimeoutMs } : {}),
  });
}

import fs from 'node:fs';
import path from 'node:path';
import type { DataConverter } from '@temporalio/common';
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
  // Only compiled code (dist/) uses it: a checkout running the TypeScript sources must never load a stale bundle.
  const compiled = __filename.endsWith('.js');
  if (compiled && process.env.ROUNDHOUSE_PREBUILT_BUNDLE !== 'false' && fs.existsSync(bundle)) return { workflowBundle: { codePath: bundle } };
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
  /** The deployment's data converter (payload encryption); clients must use the same one. */
  dataConverter?: DataConverter;
}

export async function createRoundhouseWorker(options: RoundhouseWorkerOptions): Promise<Worker> {
  const providers = options.providers ?? new ProviderRegistry({ stateDir: options.stateDir ?? '.roundhouse' });
  let worker: Worker | undefined;
  // Once shutdown is requested (SIGTERM/SIGINT), training segments stop submitting steps and return their cursor.
  const draining = () => worker !== undefined && !['INITIALIZED', 'RUNNING'].includes(worker.getState());
  worker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue,
    activities: createActivities({ providerFor: (spec) => providers.providerFor(spec), draining }),
    ...(options.dataConverter ? { dataConverter: options.dataConverter } : {}),
    ...(options.workflowBundle ? { workflowBundle: options.workflowBundle } : workflowSource()),
    shutdownGraceTime: options.shutdownGraceTime ?? options.tuning?.shutdownGraceMs ?? '20 seconds',
    // Heartbeats reach the server at least every 2 s: a pause's cancellation reaches a training segment that soon.
    maxHeartbeatThrottleInterval: '2 seconds',
    // Past the grace time activities are cancelled; should anything still hang, give up so the process can exit.
    ...(options.tuning ? { shutdownForceTime: options.tuning.shutdownGraceMs + 10_000 } : {}),
    ...(options.tuning?.maxConcurrentActivities !== undefined ? { maxConcurrentActivityTaskExecutions: options.tuning.maxConcurrentActivities } : {}),
    ...(options.tuning?.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: options.tuning.maxCachedWorkflows } : {}),
    ...(options.tuning?.stickyQueueTimeoutMs !== undefined ? { stickyQueueScheduleToStartTimeout: options.tuning.stickyQueueTimeoutMs } : {}),
  });
  return worker;
}

import fs from 'node:fs';
import path from 'node:path';
import type { DataConverter } from '@temporalio/common';
import {
  bundleWorkflowCode,
  NativeConnection,
  Runtime,
  Worker,
  type LogLevel,
  type Logger as TemporalLogger,
  type WorkerOptions,
} from '@temporalio/worker';
import { createActivities } from '../activities';
import { maskingInterceptors } from '../activities/failures';
import { registerEnvironmentSecrets } from '../config/io/secrets';
import type { Client } from '@temporalio/client';
import { dataConverterFor } from './encryption';
import { ProviderRegistry } from './providers';
import type { WorkerSettings } from '../config/io/worker-env';
import { connectClient, connectWorker, packageRoot, temporalClient } from './temporal-server';

/** A prebuilt bundle (written by `npm run build`) spares the worker webpack at start-up. */
export function prebuiltBundlePath(): string {
  return path.join(packageRoot(), 'dist', 'workflow-bundle.js');
}

export async function workflowSource(): Promise<Pick<WorkerOptions, 'workflowBundle'>> {
  const bundle = prebuiltBundlePath();
  const explicit = process.env.ROUNDHOUSE_WORKFLOW_BUNDLE;
  if (explicit) return { workflowBundle: { codePath: explicit } };
  // Only compiled code (dist/) uses it: a checkout running the TypeScript sources must never load a stale bundle.
  const compiled = __filename.endsWith('.js');
  if (compiled && process.env.ROUNDHOUSE_PREBUILT_BUNDLE !== 'false' && fs.existsSync(bundle))
    return { workflowBundle: { codePath: bundle } };
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    logger: bundlerLogger(Runtime.instance().logger),
  });
  return { workflowBundle: { code } };
}

/** The one line of the SDK's bundler that stays at info; the rest is webpack's build report. */
const BUNDLE_SUMMARY = 'Workflow bundle created';

/** The SDK's bundler logs webpack's whole build report (dozens of lines) at info: it goes to debug. */
function bundlerLogger(logger: TemporalLogger): TemporalLogger {
  const level = (requested: LogLevel, message: string): LogLevel =>
    requested === 'INFO' && message !== BUNDLE_SUMMARY ? 'DEBUG' : requested;
  return {
    log: (requested, message, meta) => logger.log(level(requested, message), message, meta),
    trace: (message, meta) => logger.trace(message, meta),
    debug: (message, meta) => logger.debug(message, meta),
    info: (message, meta) => logger.log(level('INFO', message), message, meta),
    warn: (message, meta) => logger.warn(message, meta),
    error: (message, meta) => logger.error(message, meta),
  };
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

/**
 * Activity slots per worker. A running training segment holds one for minutes while it mostly waits on the trainer
 * (HTTP and timers, no CPU), so the SDK's default of 100 would cap a worker at 100 rounds in training: the rest would
 * queue. 2,000 covers a host's rounds (the scale benchmark runs 1,000 on one 2-core worker); it bounds memory, not
 * CPU, which the rounds barely use. `ROUNDHOUSE_MAX_CONCURRENT_ACTIVITIES` overrides it.
 */
export const DEFAULT_MAX_CONCURRENT_ACTIVITIES = 2000;

export async function createRoundhouseWorker(options: RoundhouseWorkerOptions): Promise<Worker> {
  registerEnvironmentSecrets(process.env);
  const providers = options.providers ?? new ProviderRegistry({ stateDir: options.stateDir ?? '.roundhouse' });
  let worker: Worker | undefined;
  // Once shutdown is requested (SIGTERM/SIGINT), training segments stop submitting steps and return their cursor.
  const draining = () => worker !== undefined && !['INITIALIZED', 'RUNNING'].includes(worker.getState());
  worker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue,
    activities: createActivities({ providerFor: (spec) => providers.providerFor(spec), draining }),
    // Secrets are masked in everything activities send to Temporal: failures, heartbeat details, results.
    interceptors: { activity: [maskingInterceptors] },
    ...(options.dataConverter ? { dataConverter: options.dataConverter } : {}),
    ...(options.workflowBundle ? { workflowBundle: options.workflowBundle } : await workflowSource()),
    shutdownGraceTime: options.shutdownGraceTime ?? options.tuning?.shutdownGraceMs ?? '20 seconds',
    // Heartbeats reach the server at least every 2 s: a pause's cancellation reaches a training segment that soon.
    maxHeartbeatThrottleInterval: '2 seconds',
    // Past the grace time activities are cancelled; should anything still hang, give up so the process can exit.
    ...(options.tuning ? { shutdownForceTime: options.tuning.shutdownGraceMs + 10_000 } : {}),
    maxConcurrentActivityTaskExecutions: options.tuning?.maxConcurrentActivities ?? DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    ...(options.tuning?.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: options.tuning.maxCachedWorkflows } : {}),
    ...(options.tuning?.stickyQueueTimeoutMs !== undefined
      ? { stickyQueueScheduleToStartTimeout: options.tuning.stickyQueueTimeoutMs }
      : {}),
  });
  return worker;
}

/** A worker assembled from the settings, with what it holds open: its connection, the providers, and a client. */
export interface AssembledWorker {
  worker: Worker;
  providers: ProviderRegistry;
  /** A client on a connection of its own, with the deployment's data converter. */
  client: Client;
  /** Closes what the worker held: the client's and the worker's connections, then the providers (and their emulator). */
  close(): Promise<void>;
}

/**
 * The worker every CLI command that runs one assembles the same way: connections to the server at `address`
 * (default: the settings'), the providers (state in the settings' state dir), the settings' tuning and payload codec.
 */
export async function assembleWorker(settings: WorkerSettings, address = settings.address): Promise<AssembledWorker> {
  const providers = new ProviderRegistry({ stateDir: settings.stateDir });
  const opened: { close(): Promise<void> }[] = [providers];
  const close = async () => {
    for (const resource of opened.reverse()) await resource.close();
  };
  try {
    const connection = await connectWorker(settings, address);
    opened.push(connection);
    const clientConnection = await connectClient(settings, address);
    opened.push(clientConnection);
    const worker = await createRoundhouseWorker({
      connection,
      namespace: settings.namespace,
      taskQueue: settings.taskQueue,
      providers,
      tuning: settings.tuning,
      dataConverter: dataConverterFor(settings),
    });
    return { worker, providers, client: temporalClient(settings, clientConnection), close };
  } catch (err) {
    await close();
    throw err;
  }
}

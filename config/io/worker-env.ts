import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { ConfigError } from '../rules/errors';

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

const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
/** `text`: one plain line per event, for people (the default); `json`: pino's JSON lines, for log collectors. */
export const LOG_FORMATS = ['text', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The environment a worker, the CLI or a test reads. Each key is the variable's own name. */
export const WorkerEnvSchema = z.object({
  TEMPORAL_ADDRESS: hostPort.optional(),
  TEMPORAL_NAMESPACE: z
    .string()
    .trim()
    .regex(/^[A-Za-z0-9._-]{1,255}$/, 'not a valid namespace name')
    .default('default'),
  ROUNDHOUSE_TASK_QUEUE: z.string().trim().min(1, 'must not be empty').default('roundhouse'),
  TEMPORAL_CLI_PATH: existingFile.optional(),
  TEMPORAL_API_KEY: z.string().trim().min(1).optional(),
  TEMPORAL_API_KEY_FILE: existingFile.optional(),
  TEMPORAL_TLS: boolFlag.optional(),
  TEMPORAL_TLS_CLIENT_CERT_PATH: existingFile.optional(),
  TEMPORAL_TLS_CLIENT_CERT_DATA: z.string().trim().min(1).optional(),
  TEMPORAL_TLS_CLIENT_KEY_PATH: existingFile.optional(),
  TEMPORAL_TLS_CLIENT_KEY_DATA: z.string().trim().min(1).optional(),
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: existingFile.optional(),
  TEMPORAL_TLS_SERVER_CA_CERT_DATA: z.string().trim().min(1).optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().trim().min(1).optional(),
  TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: boolFlag.optional(),
  // The names Roundhouse read before Temporal's standard ones (TLS_FILES): still read, the standard name wins.
  TEMPORAL_TLS_CERT_PATH: existingFile.optional(),
  TEMPORAL_TLS_KEY_PATH: existingFile.optional(),
  TEMPORAL_TLS_CA_PATH: existingFile.optional(),
  ROUNDHOUSE_LOG_LEVEL: z.enum(LOG_LEVELS, { message: `expected one of ${LOG_LEVELS.join(', ')}` }).default('info'),
  ROUNDHOUSE_LOG_FORMAT: z.enum(LOG_FORMATS, { message: `expected one of ${LOG_FORMATS.join(', ')}` }).default('text'),
  ROUNDHOUSE_STATE_DIR: z.string().trim().min(1).default('.roundhouse'),
  ROUNDHOUSE_EMULATOR_URL: z.url({ protocol: /^https?$/ }).optional(),
  ROUNDHOUSE_MAX_CONCURRENT_ACTIVITIES: z.coerce.number().int().min(1).max(10_000).optional(),
  ROUNDHOUSE_MAX_CACHED_WORKFLOWS: z.coerce.number().int().min(0).max(100_000).optional(),
  ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).optional(),
  ROUNDHOUSE_SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).max(3_600_000).default(20_000),
  ROUNDHOUSE_METRICS_ADDRESS: hostPort.optional(),
  ROUNDHOUSE_ENCRYPTION_KEYS: z.string().trim().min(1).optional(),
  ROUNDHOUSE_ENCRYPTION_KEYS_FILE: existingFile.optional(),
  ROUNDHOUSE_ENCRYPTION_KEY_ID: z.string().trim().regex(KEY_ID, 'expected a key id of letters, digits, ., _ or - (at most 64)').optional(),
});

export type WorkerEnv = z.infer<typeof WorkerEnvSchema>;

/**
 * The TLS files by Temporal's standard names (those of the SDKs' `envconfig`): a path or the PEM text itself, and the
 * name Roundhouse read the path from before. When a standard path and its older name are both set, the standard one
 * wins and the older one is not read (nor checked).
 */
export const TLS_FILES = {
  clientCert: { path: 'TEMPORAL_TLS_CLIENT_CERT_PATH', data: 'TEMPORAL_TLS_CLIENT_CERT_DATA', alias: 'TEMPORAL_TLS_CERT_PATH' },
  clientKey: { path: 'TEMPORAL_TLS_CLIENT_KEY_PATH', data: 'TEMPORAL_TLS_CLIENT_KEY_DATA', alias: 'TEMPORAL_TLS_KEY_PATH' },
  serverCa: { path: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', data: 'TEMPORAL_TLS_SERVER_CA_CERT_DATA', alias: 'TEMPORAL_TLS_CA_PATH' },
} as const;
type TlsFile = (typeof TLS_FILES)[keyof typeof TLS_FILES];

/** The variable a TLS file comes from, and its bytes (read when asked), or undefined when none of its names is set. */
function tlsFile(e: WorkerEnv, file: TlsFile): { from: string; read: () => Buffer } | undefined {
  const pathName = e[file.path] ? file.path : e[file.alias] ? file.alias : undefined;
  const data = e[file.data];
  if (pathName && data) throw new ConfigError(file.data, `set either ${pathName} or ${file.data}, not both`);
  if (data) return { from: file.data, read: () => Buffer.from(data) };
  const filePath = pathName && e[pathName];
  return pathName && filePath ? { from: pathName, read: () => fs.readFileSync(filePath) } : undefined;
}

/** The client certificate and its key: both or neither; a missing half is named as its other half's family names it. */
function clientCertPair(e: WorkerEnv): { crt: () => Buffer; key: () => Buffer } | undefined {
  const cert = tlsFile(e, TLS_FILES.clientCert);
  const key = tlsFile(e, TLS_FILES.clientKey);
  if (cert && key) return { crt: cert.read, key: key.read };
  if (!cert && !key) return undefined;
  const [given, names] = cert ? [cert, TLS_FILES.clientCert] : [key!, TLS_FILES.clientKey];
  const family = (['path', 'data', 'alias'] as const).find((f) => names[f] === given.from)!;
  const [certName, keyName] = [TLS_FILES.clientCert[family], TLS_FILES.clientKey[family]];
  throw new ConfigError(cert ? keyName : certName, `mTLS needs both ${certName} and ${keyName}`);
}

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
  logFormat: LogFormat;
  stateDir: string;
  emulatorUrl?: string;
  tuning: {
    maxConcurrentActivities?: number;
    maxCachedWorkflows?: number;
    stickyQueueTimeoutMs?: number;
    shutdownGraceMs: number;
  };
  /** `host:port` of the Prometheus endpoint (Temporal's worker metrics and Roundhouse's own). */
  metricsAddress?: string;
  /** Payload encryption keys; undefined when payloads are not encrypted. */
  encryption?: EncryptionKeyring;
}

/** AES-256 keys by id: payloads are encrypted with the current one and decrypted with whichever id they name. */
export interface EncryptionKeyring {
  currentKeyId: string;
  keys: Map<string, Buffer>;
}

/**
 * Parses `id=key` entries (comma- or newline-separated; `#` starts a comment) where each key is 32 bytes in base64
 * or hex. The current key is `currentKeyId` when given, else the first entry: rotating is putting a new key first
 * and keeping the old ones for as long as histories encrypted with them are read.
 */
export function parseEncryptionKeys(text: string, variable: string, currentKeyId?: string): EncryptionKeyring {
  const keys = new Map<string, Buffer>();
  const entries = text
    .split(/[\n,]/)
    .map((line) => line.replace(/#.*$/, '').trim())
    .filter(Boolean);
  for (const entry of entries) {
    const at = entry.indexOf('=');
    const id = at > 0 ? entry.slice(0, at).trim() : '';
    const encoded = at > 0 ? entry.slice(at + 1).trim() : '';
    if (!KEY_ID.test(id)) throw new ConfigError(variable, 'expected entries id=key (key id of letters, digits, ., _ or -)');
    const key = /^[0-9a-fA-F]{64}$/.test(encoded) ? Buffer.from(encoded, 'hex') : Buffer.from(encoded, 'base64');
    if (key.length !== 32) throw new ConfigError(variable, `key '${id}' is not 32 bytes (give 32 random bytes in base64 or hex)`);
    if (keys.has(id)) throw new ConfigError(variable, `key id '${id}' appears twice`);
    keys.set(id, key);
  }
  if (keys.size === 0) throw new ConfigError(variable, 'has no keys');
  const current = currentKeyId ?? [...keys.keys()][0]!;
  if (!keys.has(current)) throw new ConfigError('ROUNDHOUSE_ENCRYPTION_KEY_ID', `'${current}' is not among the keys`);
  return { currentKeyId: current, keys };
}

/** The log format the environment asks for, for a path that must log even when the rest of the environment is bad. */
export function logFormatOf(env: NodeJS.ProcessEnv = process.env): LogFormat {
  const parsed = WorkerEnvSchema.shape.ROUNDHOUSE_LOG_FORMAT.safeParse(env.ROUNDHOUSE_LOG_FORMAT || undefined);
  return parsed.success ? parsed.data : 'text';
}

/** Reads and validates the worker environment; throws a ConfigError naming the first bad variable. */
export function loadWorkerSettings(env: NodeJS.ProcessEnv = process.env): WorkerSettings {
  const present: Record<string, string | undefined> = Object.fromEntries(
    Object.keys(WorkerEnvSchema.shape)
      .filter((k) => env[k] !== undefined && env[k] !== '')
      .map((k) => [k, env[k]]),
  );
  for (const file of Object.values(TLS_FILES)) if (present[file.path]) delete present[file.alias];
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
  if (e.TEMPORAL_TLS_DISABLE_HOST_VERIFICATION) {
    throw new ConfigError(
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
      "is true, but Roundhouse always verifies the server's certificate: set TEMPORAL_TLS_SERVER_NAME to the name it holds, or TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed it",
    );
  }
  const pair = clientCertPair(e);
  const serverCa = tlsFile(e, TLS_FILES.serverCa);
  const apiKey = e.TEMPORAL_API_KEY ?? (e.TEMPORAL_API_KEY_FILE ? fs.readFileSync(e.TEMPORAL_API_KEY_FILE, 'utf8').trim() : undefined);
  if (e.TEMPORAL_API_KEY_FILE && !apiKey) throw new ConfigError('TEMPORAL_API_KEY_FILE', 'file is empty');

  const wantsTls = e.TEMPORAL_TLS ?? Boolean(apiKey || pair || serverCa);
  if (e.TEMPORAL_TLS === false && (pair || apiKey)) {
    throw new ConfigError('TEMPORAL_TLS', 'is false, but an API key or client certificate needs TLS');
  }
  let tls: TemporalTls | undefined;
  if (wantsTls) {
    tls = {};
    if (e.TEMPORAL_TLS_SERVER_NAME) tls.serverName = e.TEMPORAL_TLS_SERVER_NAME;
    if (serverCa) tls.serverRootCACertificate = serverCa.read();
    if (pair) tls.clientCertPair = { crt: pair.crt(), key: pair.key() };
  }
  if ((apiKey || tls) && !e.TEMPORAL_ADDRESS) {
    throw new ConfigError('TEMPORAL_ADDRESS', 'is required when an API key or TLS is configured');
  }
  if (e.ROUNDHOUSE_ENCRYPTION_KEYS && e.ROUNDHOUSE_ENCRYPTION_KEYS_FILE) {
    throw new ConfigError(
      'ROUNDHOUSE_ENCRYPTION_KEYS_FILE',
      'set either ROUNDHOUSE_ENCRYPTION_KEYS or ROUNDHOUSE_ENCRYPTION_KEYS_FILE, not both',
    );
  }
  if (e.ROUNDHOUSE_ENCRYPTION_KEY_ID && !e.ROUNDHOUSE_ENCRYPTION_KEYS && !e.ROUNDHOUSE_ENCRYPTION_KEYS_FILE) {
    throw new ConfigError(
      'ROUNDHOUSE_ENCRYPTION_KEY_ID',
      'is set but there are no keys (ROUNDHOUSE_ENCRYPTION_KEYS or ROUNDHOUSE_ENCRYPTION_KEYS_FILE)',
    );
  }
  const encryption = e.ROUNDHOUSE_ENCRYPTION_KEYS
    ? parseEncryptionKeys(e.ROUNDHOUSE_ENCRYPTION_KEYS, 'ROUNDHOUSE_ENCRYPTION_KEYS', e.ROUNDHOUSE_ENCRYPTION_KEY_ID)
    : e.ROUNDHOUSE_ENCRYPTION_KEYS_FILE
      ? parseEncryptionKeys(
          fs.readFileSync(e.ROUNDHOUSE_ENCRYPTION_KEYS_FILE, 'utf8'),
          'ROUNDHOUSE_ENCRYPTION_KEYS_FILE',
          e.ROUNDHOUSE_ENCRYPTION_KEY_ID,
        )
      : undefined;
  return {
    address: e.TEMPORAL_ADDRESS,
    namespace: e.TEMPORAL_NAMESPACE,
    taskQueue: e.ROUNDHOUSE_TASK_QUEUE,
    cliPath: e.TEMPORAL_CLI_PATH,
    apiKey,
    tls,
    logLevel: e.ROUNDHOUSE_LOG_LEVEL,
    logFormat: e.ROUNDHOUSE_LOG_FORMAT,
    stateDir: path.resolve(e.ROUNDHOUSE_STATE_DIR),
    emulatorUrl: e.ROUNDHOUSE_EMULATOR_URL,
    tuning: {
      maxConcurrentActivities: e.ROUNDHOUSE_MAX_CONCURRENT_ACTIVITIES,
      maxCachedWorkflows: e.ROUNDHOUSE_MAX_CACHED_WORKFLOWS,
      stickyQueueTimeoutMs: e.ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS,
      shutdownGraceMs: e.ROUNDHOUSE_SHUTDOWN_GRACE_MS,
    },
    metricsAddress: e.ROUNDHOUSE_METRICS_ADDRESS,
    encryption,
  };
}

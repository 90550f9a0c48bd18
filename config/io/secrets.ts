import fs from 'node:fs';

/**
 * Secret values this process holds (API keys, tokens, passwords, codec keys, the JWTs a provider client obtains),
 * masked by value wherever text leaves the process: log lines, failures and heartbeats sent to Temporal, activity
 * results, reports. Field names and `Bearer` headers are not enough: a Tinker key travels in `X-API-Key`, and an
 * error that quotes a request quotes its headers.
 */

export const REDACTED = '[redacted]';

/** Credentials by the header or scheme that carries them, whatever their value (a key this process never saw). */
const CREDENTIAL_PATTERNS: [RegExp, string][] = [
  [/\b(Bearer|Basic|Api-Key)\s+[A-Za-z0-9._~+/=-]+/g, `$1 ${REDACTED}`],
  [/\b(x-api-key)(\\?["']?\s*[:=]\s*\\?["']?)[^\s"'\\,;}]+/gi, `$1$2${REDACTED}`],
];

/** Names of variables that hold secrets: the providers', MLflow's, S3's, Temporal's, the codec server's, and any `…_API_KEY`, `…_TOKEN`, `…_SECRET`, `…_PASSWORD`. */
const SECRET_NAME = /(^|_)(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|SECRET_ACCESS_KEY|PRIVATE_KEY|CLIENT_KEY_DATA)$/i;

/** Values shorter than this are not masked: they would blank ordinary words. */
const MIN_LENGTH = 6;
/** Rotating credentials (short-lived JWTs) kept for masking: the latest ones. */
const MAX_ROTATING = 256;

const lasting = new Set<string>();
const rotating = new Set<string>();

/**
 * Adds a secret value (and the forms it takes in a URL or a JSON string). `rotating` ones (JWTs refreshed every few
 * minutes) are kept to the latest few hundred, so a long-lived worker does not scan for every token it ever held.
 */
export function registerSecret(value: string | undefined, options: { rotating?: boolean } = {}): void {
  if (!value || value.length < MIN_LENGTH) return;
  const into = options.rotating ? rotating : lasting;
  for (const form of new Set([value, encodeURIComponent(value), JSON.stringify(value).slice(1, -1)])) {
    into.delete(form);
    into.add(form);
  }
  while (rotating.size > MAX_ROTATING) rotating.delete(rotating.values().next().value as string);
}

/**
 * Registers the secrets of an environment: every variable named like one (`TOGETHER_API_KEY`, `BASETEN_API_KEY`,
 * `TINKER_API_KEY`, `TEMPORAL_API_KEY`, `MLFLOW_TRACKING_TOKEN`, `MLFLOW_TRACKING_PASSWORD`, `AWS_SECRET_ACCESS_KEY`,
 * `AWS_SESSION_TOKEN`, `ROUNDHOUSE_CODEC_TOKEN`, `WANDB_API_KEY`, `TEMPORAL_TLS_CLIENT_KEY_DATA`, a reward's judge key…),
 * the contents of the `…_FILE` variant of each, and the Basic credential MLflow's username and password make.
 */
export function registerEnvironmentSecrets(env: NodeJS.ProcessEnv): void {
  for (const [name, value] of Object.entries(env)) {
    if (!value) continue;
    if (SECRET_NAME.test(name)) registerSecret(value);
    else if (name.endsWith('_FILE') && SECRET_NAME.test(name.slice(0, -'_FILE'.length))) registerSecret(fileText(value));
  }
  if (env.MLFLOW_TRACKING_USERNAME && env.MLFLOW_TRACKING_PASSWORD)
    registerSecret(Buffer.from(`${env.MLFLOW_TRACKING_USERNAME}:${env.MLFLOW_TRACKING_PASSWORD}`).toString('base64'));
}

function fileText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined; // a missing file is reported where the variable is read
  }
}

/** The text with every registered secret and every credential header masked. */
export function maskSecrets(text: string): string {
  let out = text;
  for (const [pattern, replacement] of CREDENTIAL_PATTERNS) out = out.replace(pattern, replacement);
  for (const secrets of [lasting, rotating]) for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  return out;
}

/**
 * A value with `maskSecrets` applied to every string in it, at any depth (plain objects and arrays are copied; other
 * objects, numbers and bytes are kept as they are). Errors become `{type, message, stack}`.
 */
export function maskSecretsIn(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return maskSecrets(value);
  if (value === null || typeof value !== 'object' || depth > 16) return value;
  if (value instanceof Error)
    return { type: value.name, message: maskSecrets(value.message), stack: value.stack && maskSecrets(value.stack) };
  if (Array.isArray(value)) return value.map((v) => maskSecretsIn(v, depth + 1));
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = maskSecretsIn(v, depth + 1);
  return out;
}

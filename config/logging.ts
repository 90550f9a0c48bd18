import pino, { type DestinationStream, type Logger, type LoggerOptions } from 'pino';
import pretty from 'pino-pretty';

export type { Logger } from 'pino';

const KEY_LIKE = /(api[-_]?key|apikey|secret|token|password|passwd|authorization|credential|private[-_]?key|cookie)/i;
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/g;
const REDACTED = '[redacted]';

/** Secret values seen at start-up (API keys from env or files): masked wherever they appear in a log line. */
const knownSecrets = new Set<string>();

export function registerSecret(value: string | undefined): void {
  if (value && value.length >= 6) knownSecrets.add(value);
}

export function redactText(text: string): string {
  let out = text.replace(BEARER, `$1 ${REDACTED}`);
  for (const secret of knownSecrets) out = out.split(secret).join(REDACTED);
  return out;
}

/** Masks key-like fields at any depth and known secret values inside strings. */
export function redactValue(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return redactText(value);
  if (value === null || typeof value !== 'object' || depth > 8) return value;
  if (value instanceof Error) {
    return { type: value.name, message: redactText(value.message), stack: value.stack && redactText(value.stack) };
  }
  if (Array.isArray(value)) return value.map((v) => redactValue(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    out[k] = KEY_LIKE.test(k) && v !== undefined && v !== null && v !== '' ? REDACTED : redactValue(v, depth + 1);
  }
  return out;
}

export interface LoggerSettings {
  level?: string;
  name?: string;
  /** Where lines go; defaults to stdout, pretty-printed when stdout is a terminal. */
  destination?: DestinationStream;
  pretty?: boolean;
}

export function createLogger(settings: LoggerSettings = {}): Logger {
  const options: LoggerOptions = {
    level: settings.level ?? 'info',
    name: settings.name ?? 'roundhouse',
    formatters: { log: (obj) => redactValue(obj) as Record<string, unknown> },
    hooks: {
      logMethod(args, method) {
        method.apply(this, args.map((a) => (typeof a === 'string' ? redactText(a) : a)) as Parameters<typeof method>);
      },
    },
  };
  const usePretty = settings.pretty ?? (!settings.destination && Boolean(process.stdout.isTTY));
  const destination = usePretty
    ? pretty({ colorize: true, sync: true, destination: settings.destination ?? 1 })
    : settings.destination ?? pino.destination({ dest: 1, sync: true });
  return pino(options, destination);
}

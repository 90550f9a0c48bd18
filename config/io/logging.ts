import pino, { type DestinationStream, type Logger, type LoggerOptions } from 'pino';
import pretty from 'pino-pretty';
import { maskSecrets, REDACTED } from './secrets';
import type { LogFormat } from './worker-env';

export type { Logger } from 'pino';

const KEY_LIKE = /(api[-_]?key|apikey|secret|token|password|passwd|authorization|credential|private[-_]?key|cookie)/i;

export { registerSecret } from './secrets';

/** A log line's text with every registered secret and every credential header masked (config/secrets.ts). */
export const redactText = maskSecrets;

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
  /** Where lines go; defaults to stdout. Colours only when it is a terminal. */
  destination?: DestinationStream;
  /** `text` (default): plain lines for people, terminal or not; `json`: JSON lines for log collectors. */
  format?: LogFormat;
}

/** Fields every line carries that a person reading one process's output does not need. */
const CONTEXT_FIELDS = ['pid', 'hostname', 'name', 'component', 'sdkComponent'];
const NOT_SHOWN = new Set(['level', 'time', ...CONTEXT_FIELDS]);
const ERROR_LEVEL = 50;

function shown(value: unknown): string {
  if (typeof value === 'string') return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value);
  return JSON.stringify(value) ?? String(value);
}

function isErrorLike(value: unknown): value is { message: string; stack?: string } {
  return typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string' && 'stack' in value;
}

/** The message, then each field as key=value; an error keeps its message inline and, at level error, its stack below. */
function textLine(log: Record<string, unknown>, messageKey: string): string {
  let stacks = '';
  const fields = Object.entries(log)
    .filter(([key, value]) => !NOT_SHOWN.has(key) && key !== messageKey && value !== undefined)
    .map(([key, value]) => {
      if (!isErrorLike(value)) return `${key}=${shown(value)}`;
      if (Number(log.level) >= ERROR_LEVEL && value.stack) stacks += `\n    ${value.stack.split('\n').join('\n    ')}`;
      return `${key}=${shown(value.message)}`;
    });
  const message = typeof log[messageKey] === 'string' ? (log[messageKey] as string) : '';
  return [message, ...fields].filter(Boolean).join(' ') + stacks;
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
  if (settings.format === 'json') return pino(options, settings.destination ?? pino.destination({ dest: 1, sync: true }));
  const terminal = settings.destination ? Boolean((settings.destination as { isTTY?: boolean }).isTTY) : Boolean(process.stdout.isTTY);
  const text = pretty({
    colorize: terminal,
    sync: true,
    destination: settings.destination ?? 1,
    translateTime: 'SYS:HH:MM:ss',
    ignore: CONTEXT_FIELDS.join(','),
    hideObject: true,
    messageFormat: (log, messageKey) => textLine(log, messageKey),
  });
  return pino(options, text);
}

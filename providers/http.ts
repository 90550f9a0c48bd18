import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request, type Dispatcher } from 'undici';
import type { z } from 'zod';
import { ProviderError } from './errors';

/**
 * The one HTTP helper every dialect uses: undici with keep-alive, retries with backoff on connection errors and
 * 408/425/429/5xx (honouring `retry-after-ms`, `retry-after` and `x-should-retry`), response validation with zod,
 * and the error taxonomy. A 409 is conclusive (a conflict stays one: a reused sequence number, a name taken). A request that is not safe to replay (a create without an idempotency key) is never
 * resent after an ambiguous failure: it fails as `needs-reconcile`.
 */

export interface HttpClientOptions {
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` (or as `authScheme` / `authHeader` say); never logged or put in an error. */
  apiKey?: string;
  /** The header the key goes in: `Authorization: Bearer <key>` (default), or another header holding the key as is (Tinker: `x-api-key`). */
  authHeader?: 'authorization' | 'x-api-key';
  /** The scheme before the key in `Authorization` (default `Bearer`; Baseten Loops: `Api-Key`, as its SDK sends). */
  authScheme?: 'Bearer' | 'Api-Key';
  userAgent?: string;
  maxRetries?: number;
  initialRetryDelayMs?: number;
  maxRetryDelayMs?: number;
  /** A server-suggested delay longer than this is not honoured (the backoff applies). */
  maxRetryAfterMs?: number;
  requestTimeoutMs?: number;
  connections?: number;
  /** Seeded jitter in tests; Math.random by default. */
  random?: () => number;
}

export type QueryValue = string | number | boolean | undefined | readonly string[];

export interface RequestSpec<T> {
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  path: string;
  query?: Record<string, QueryValue>;
  body?: unknown;
  /** A body sent as is instead of JSON (Tinker's protobuf forward_backward). */
  rawBody?: { bytes: Uint8Array; contentType: string };
  idempotencyKey?: string;
  /** The header the idempotency key goes in (default `idempotency-key`; Tinker: `x-idempotency-key`). */
  idempotencyHeader?: string;
  /** Statuses answered to the caller as they are, neither retried nor an error (Tinker's 408 `try_again` long-poll answer). */
  passStatuses?: readonly number[];
  /** Whether resending after an ambiguous failure is safe. Default: GET, or any request with an idempotency key. */
  replaySafe?: boolean;
  /** This request's retry budget, where its dialect's SDK gives it another than the client's (Together's session create: 7). */
  maxRetries?: number;
  schema: z.ZodType<T>;
  signal?: AbortSignal;
  /** Absolute URL (presigned links), sent without Authorization. */
  absoluteUrl?: string;
  /** Extra headers a dialect needs (e.g. Baseten's `X-Run-Id`). */
  headers?: Record<string, string>;
  /** Sees the headers of the successful answer (values a dialect reads from headers, e.g. a policy version). */
  onResponseHeaders?: (headers: Record<string, string | string[] | undefined>) => void;
}

/** Connection failures where the request never reached the server: always safe to retry. */
const NOT_SENT = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
/** 425 (Too Early): what was asked for is still being made (a checkpoint being written). */
const RETRY_STATUSES = new Set([408, 425, 429, 500, 502, 503, 504]);

export class HttpClient {
  private readonly agent: Agent;
  private readonly options: Required<Omit<HttpClientOptions, 'apiKey' | 'userAgent' | 'authHeader' | 'authScheme'>> &
    Pick<HttpClientOptions, 'apiKey' | 'userAgent' | 'authHeader' | 'authScheme'>;

  constructor(options: HttpClientOptions) {
    this.options = {
      maxRetries: 5,
      initialRetryDelayMs: 250,
      maxRetryDelayMs: 10_000,
      maxRetryAfterMs: 60_000,
      requestTimeoutMs: 300_000,
      connections: 64,
      random: Math.random,
      ...options,
      baseUrl: options.baseUrl.replace(/\/+$/, ''),
    };
    this.agent = new Agent({ keepAliveTimeout: 10_000, connections: this.options.connections });
  }

  get baseUrl(): string {
    return this.options.baseUrl;
  }

  async request<T>(spec: RequestSpec<T>): Promise<T> {
    const answer = await this.exchange(spec);
    return this.parse(spec, answer.bytes.toString('utf8'), `${spec.method} ${spec.path}`);
  }

  /**
   * The answer's status, content type and bytes, unparsed (a protobuf result), after the same retries and error
   * taxonomy as `request`; `schema` is not applied.
   */
  async requestRaw(spec: Omit<RequestSpec<unknown>, 'schema'>): Promise<{ status: number; contentType: string; bytes: Buffer }> {
    return this.exchange({ ...spec, schema: undefined as never });
  }

  private async exchange(spec: RequestSpec<unknown>): Promise<{ status: number; contentType: string; bytes: Buffer }> {
    const replaySafe = spec.replaySafe ?? (spec.method === 'GET' || spec.idempotencyKey !== undefined);
    const url = spec.absoluteUrl ?? this.url(spec.path, spec.query);
    const where = `${spec.method} ${spec.path}`;
    const maxRetries = spec.maxRetries ?? this.options.maxRetries;
    for (let attempt = 0; ; attempt++) {
      let response: Dispatcher.ResponseData;
      try {
        response = await request(url, {
          dispatcher: this.agent,
          method: spec.method,
          headers: this.headers(spec),
          body: spec.rawBody ? Buffer.from(spec.rawBody.bytes) : spec.body === undefined ? undefined : JSON.stringify(spec.body),
          signal: spec.signal,
          headersTimeout: this.options.requestTimeoutMs,
          bodyTimeout: this.options.requestTimeoutMs,
        });
      } catch (err) {
        if (spec.signal?.aborted) throw err;
        const code = (err as { code?: string }).code ?? 'NETWORK';
        const notSent = NOT_SENT.has(code);
        if (!notSent && !replaySafe) {
          throw new ProviderError(
            'RESPONSE_LOST',
            'needs-reconcile',
            `${where}: the connection failed (${code}) after the request was sent; its outcome is unknown`,
            { method: spec.method, path: spec.path, cause: err },
          );
        }
        if (attempt < maxRetries) {
          await sleep(this.backoff(attempt), undefined, { signal: spec.signal });
          continue;
        }
        throw new ProviderError('NETWORK', 'retryable', `${where}: connection failed (${code}) after ${attempt + 1} attempts`, {
          method: spec.method,
          path: spec.path,
          cause: err,
        });
      }

      const bytes = Buffer.from(await response.body.arrayBuffer());
      const status = response.statusCode;
      if ((status >= 200 && status < 300) || spec.passStatuses?.includes(status)) {
        spec.onResponseHeaders?.(response.headers);
        return { status, contentType: headerText(response.headers['content-type']) ?? '', bytes };
      }
      const text = bytes.toString('utf8');

      const retryAfterMs = this.retryAfter(response.headers);
      const shouldRetryHeader = headerText(response.headers['x-should-retry']);
      const transient = shouldRetryHeader !== undefined ? shouldRetryHeader === 'true' : RETRY_STATUSES.has(status);
      // 429 and 503 are refusals before any work; other transient statuses may hide an applied request.
      const resendable = replaySafe || status === 429 || status === 503;
      const { message, code } = errorBody(text);
      if (transient && resendable && attempt < maxRetries) {
        await sleep(retryAfterMs ?? this.backoff(attempt), undefined, { signal: spec.signal });
        continue;
      }
      const details = { status, providerCode: code, retryAfterMs, method: spec.method, path: spec.path };
      const summary = `${where}: HTTP ${status}${message ? `: ${message}` : ''}`;
      if (transient && !resendable) throw new ProviderError(`HTTP_${status}`, 'needs-reconcile', `${summary} (outcome unknown)`, details);
      if (transient) throw new ProviderError(`HTTP_${status}`, 'retryable', `${summary} (after ${attempt + 1} attempts)`, details);
      throw new ProviderError(
        status === 404 ? 'NOT_FOUND' : status === 401 || status === 403 ? 'UNAUTHORIZED' : `HTTP_${status}`,
        'non-retryable',
        summary,
        details,
      );
    }
  }

  private parse<T>(spec: RequestSpec<T>, text: string, where: string): T {
    let json: unknown;
    try {
      json = text.trim() === '' ? {} : JSON.parse(text);
    } catch {
      throw new ProviderError('BAD_RESPONSE', 'retryable', `${where}: response is not JSON: ${text.slice(0, 200)}`, {
        method: spec.method,
        path: spec.path,
      });
    }
    const parsed = spec.schema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ProviderError(
        'BAD_RESPONSE',
        'non-retryable',
        `${where}: unexpected response shape at ${issue.path.join('.') || '(root)'}: ${issue.message}`,
        { method: spec.method, path: spec.path },
      );
    }
    return parsed.data;
  }

  private url(path: string, query?: Record<string, QueryValue>): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      params.set(k, Array.isArray(v) ? v.join(',') : String(v)); // arrays go comma-joined, as the providers expect
    }
    const qs = params.toString();
    return `${this.options.baseUrl}${path}${qs ? `?${qs}` : ''}`;
  }

  private headers(spec: RequestSpec<unknown>): Record<string, string> {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': this.options.userAgent ?? 'roundhouse' };
    if (spec.rawBody) headers['content-type'] = spec.rawBody.contentType;
    else if (spec.body !== undefined) headers['content-type'] = 'application/json';
    if (this.options.apiKey && !spec.absoluteUrl) {
      if (this.options.authHeader === 'x-api-key') headers['x-api-key'] = this.options.apiKey;
      else headers.authorization = `${this.options.authScheme ?? 'Bearer'} ${this.options.apiKey}`;
    }
    if (spec.idempotencyKey !== undefined) headers[spec.idempotencyHeader ?? 'idempotency-key'] = spec.idempotencyKey;
    return { ...headers, ...spec.headers };
  }

  private backoff(attempt: number): number {
    const base = Math.min(this.options.initialRetryDelayMs * 2 ** attempt, this.options.maxRetryDelayMs);
    return base * (1 - 0.25 * this.options.random());
  }

  private retryAfter(headers: Record<string, string | string[] | undefined>): number | undefined {
    const ms = Number(headerText(headers['retry-after-ms']));
    let delay: number | undefined = Number.isFinite(ms) && ms > 0 ? ms : undefined;
    const after = headerText(headers['retry-after']);
    if (delay === undefined && after !== undefined) {
      const seconds = Number(after);
      delay = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(after) - Date.now();
    }
    return delay !== undefined && delay > 0 && delay <= this.options.maxRetryAfterMs ? delay : undefined;
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

function headerText(h: string | string[] | undefined): string | undefined {
  return Array.isArray(h) ? h[0] : h;
}

/**
 * Reads the reason from whichever error-body shape a provider uses: `error.message` / `error` / `message` (and a code),
 * or FastAPI's `detail` — a string, or a list of `{loc, msg}` (a request that failed validation).
 */
export function errorBody(text: string): { message?: string; code?: string } {
  try {
    const json = JSON.parse(text) as {
      error?: { message?: unknown; code?: unknown } | string;
      message?: unknown;
      code?: unknown;
      error_code?: unknown; // MLflow's REST API
      detail?: unknown; // FastAPI (self-hosted Tinker servers)
    };
    const inner = typeof json.error === 'object' && json.error ? json.error : undefined;
    const message = inner?.message ?? (typeof json.error === 'string' ? json.error : (json.message ?? detailText(json.detail)));
    const code = inner?.code ?? json.code ?? json.error_code;
    return { message: bodyText(message), code: bodyText(code) };
  } catch {
    return { message: text.slice(0, 300) || undefined };
  }
}

/** FastAPI's `detail`: its text, or each validation problem as `<loc>: <msg> (got '<input>')`. */
function detailText(detail: unknown): string | undefined {
  if (typeof detail === 'string') return detail;
  if (!Array.isArray(detail)) return detail === undefined ? undefined : JSON.stringify(detail);
  return detail
    .map((d: { loc?: unknown; msg?: unknown; input?: unknown }) => {
      const loc = Array.isArray(d?.loc) ? d.loc.join('.') : undefined;
      const msg = typeof d?.msg === 'string' ? d.msg : JSON.stringify(d);
      const input = typeof d?.input === 'string' ? ` (got '${d.input.slice(0, 120)}')` : '';
      return `${loc ? `${loc}: ` : ''}${msg}${input}`;
    })
    .join('; ');
}

/** A field of an error body as text: a nested object is shown as JSON, not as `[object Object]`. */
function bodyText(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  return typeof value === 'string' ? value : JSON.stringify(value);
}

export interface PollOptions {
  initialIntervalMs?: number;
  maxIntervalMs?: number;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Polls `check` until it returns a value, backing off from the initial interval to the maximum. */
export async function poll<T>(check: () => Promise<T | undefined>, what: string, options: PollOptions = {}): Promise<T> {
  const { initialIntervalMs = 100, maxIntervalMs = 2_000, timeoutMs = 300_000, signal } = options;
  const deadline = Date.now() + timeoutMs;
  let interval = initialIntervalMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() >= deadline) throw new ProviderError('POLL_TIMEOUT', 'retryable', `${what}: not done after ${timeoutMs} ms`);
    await sleep(Math.min(interval, Math.max(0, deadline - Date.now())), undefined, { signal });
    interval = Math.min(interval * 2, maxIntervalMs);
  }
}

import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { EmulatorHttpError, badRequest } from './errors';

export interface EmulatorRequest {
  method: string;
  path: string;
  params: Record<string, string>;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  /** Parsed JSON body; undefined for an empty body or a binary one (`application/x-protobuf`). */
  body: unknown;
  rawBody: string;
  /** The body's bytes, as sent. */
  bytes: Buffer;
}

export interface JsonReply {
  status?: number;
  body: unknown;
  headers?: Record<string, string>;
  /** A binary reply instead of `body` (Tinker's protobuf results), sent with `contentType`. */
  bytes?: Uint8Array;
  contentType?: string;
}

/** A body that is not JSON: left to the route to decode. */
export function isBinaryBody(headers: IncomingMessage['headers']): boolean {
  return /application\/x-protobuf/i.test(String(headers['content-type'] ?? ''));
}

export type Handler = (req: EmulatorRequest) => Promise<JsonReply> | JsonReply;

interface Route {
  method: string;
  pattern: RegExp;
  names: string[];
  handler: Handler;
}

/** A tiny path router: `/v1/rl/model-resources/:id/stop` style patterns. */
export class Router {
  private readonly routes: Route[] = [];

  add(method: string, path: string, handler: Handler): this {
    const names: string[] = [];
    const pattern = new RegExp(
      `^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:(\w+)/g, (_m, name: string) => {
        names.push(name);
        return '([^/]+)';
      })}$`,
    );
    this.routes.push({ method, pattern, names, handler });
    return this;
  }

  match(method: string, path: string): { handler: Handler; params: Record<string, string> } | 'method-not-allowed' | undefined {
    let pathMatched = false;
    for (const route of this.routes) {
      const m = route.pattern.exec(path);
      if (!m) continue;
      pathMatched = true;
      if (route.method !== method) continue;
      const params = Object.fromEntries(route.names.map((n, i) => [n, decodeURIComponent(m[i + 1]!)]));
      return { handler: route.handler, params };
    }
    return pathMatched ? 'method-not-allowed' : undefined;
  }
}

export const MAX_BODY_BYTES = 64 * 1024 * 1024;

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new EmulatorHttpError(413, 'PAYLOAD_TOO_LARGE', `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export function parseJsonBody(raw: string): unknown {
  if (raw.trim() === '') return undefined;
  try {
    return JSON.parse(raw);
  } catch (err) {
    throw badRequest(`malformed JSON body: ${(err as Error).message}`, 'INVALID_JSON');
  }
}

export function sendJson(res: ServerResponse, reply: JsonReply): void {
  if (reply.bytes) {
    res.writeHead(reply.status ?? 200, {
      'content-type': reply.contentType ?? 'application/octet-stream',
      'content-length': reply.bytes.byteLength,
      ...reply.headers,
    });
    res.end(reply.bytes);
    return;
  }
  const payload = JSON.stringify(reply.body);
  res.writeHead(reply.status ?? 200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...reply.headers,
  });
  res.end(payload);
}

export function errorReply(err: unknown): JsonReply {
  if (err instanceof EmulatorHttpError) {
    return { status: err.status, headers: err.headers, body: { error: { message: err.message, code: err.code } } };
  }
  return {
    status: 500,
    body: { error: { message: `internal emulator error: ${(err as Error)?.message ?? String(err)}`, code: 'INTERNAL' } },
  };
}

export type { IncomingMessage, ServerResponse };
export { http };

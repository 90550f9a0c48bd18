import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import type { CodecAuthenticator } from './codec-auth';

/** A payload as the codec server protocol carries it: metadata values and data in base64. */
interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

const MAX_BODY_BYTES = 8 * 1024 * 1024;

function fromJson(p: JsonPayload): Payload {
  return {
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, new Uint8Array(Buffer.from(v, 'base64'))])),
    data: new Uint8Array(Buffer.from(p.data ?? '', 'base64')),
  };
}

function toJson(p: Payload): JsonPayload {
  return {
    metadata: Object.fromEntries(
      Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? new Uint8Array()).toString('base64')]),
    ),
    data: Buffer.from(p.data ?? new Uint8Array()).toString('base64'),
  };
}

export interface CodecServerOptions {
  codec: PayloadCodec;
  host?: string;
  port?: number;
  /** Browser origins allowed to call it (the Temporal Web UI's), e.g. http://localhost:8080. */
  corsOrigins?: string[];
  /** Every /encode and /decode request must pass this (workers/codec-auth.ts); anything else gets 401. */
  authenticate: CodecAuthenticator;
  /** Told of each refused request (never the credential itself). */
  onRefused?: (reason: string, remote: string | undefined) => void;
}

export interface RunningCodecServer {
  url: string;
  close(): Promise<void>;
}

/**
 * Temporal's codec server protocol (POST /encode, POST /decode with `{payloads: [...]}`), so the Web UI and
 * `temporal` CLI can show encrypted payloads. Only authenticated requests are answered (a bearer token, or a JWT
 * the Web UI forwards); anything else gets 401 before its body is read.
 */
export async function startCodecServer(options: CodecServerOptions): Promise<RunningCodecServer> {
  const origins = new Set(options.corsOrigins ?? []);
  const server = http.createServer((req, res) => {
    const origin = req.headers.origin;
    if (origin && origins.has(origin)) {
      res.setHeader('access-control-allow-origin', origin);
      res.setHeader('access-control-allow-methods', 'POST, OPTIONS');
      res.setHeader('access-control-allow-headers', 'content-type, x-namespace, authorization');
      res.setHeader('vary', 'origin');
    }
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'OPTIONS') {
      res.writeHead(204);
      res.end();
      return;
    }
    const route = (req.url ?? '').split('?')[0]!.replace(/\/+$/, '');
    if (req.method !== 'POST' || !['/encode', '/decode'].includes(route)) {
      reply(404, { error: { code: 'NOT_FOUND', message: 'POST /encode or /decode' } });
      return;
    }
    req.pause(); // nothing of the body is decoded before the caller is authenticated
    let refused = false;
    // authenticate() never throws (every failure is a refusal), so this promise is never rejected.
    void options.authenticate(req.headers.authorization).then((auth) => {
      if (!auth.ok) {
        refused = true;
        options.onRefused?.(auth.reason, req.socket.remoteAddress);
        res.setHeader('www-authenticate', 'Bearer');
        reply(401, { error: { code: 'UNAUTHENTICATED', message: auth.reason } });
      }
      req.resume();
    });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) req.destroy();
      else if (!refused) chunks.push(chunk);
    });
    const respond = async () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { payloads?: JsonPayload[] };
        if (!Array.isArray(body.payloads)) throw new Error('payloads: expected an array');
        const payloads = body.payloads.map(fromJson);
        const out = route === '/encode' ? await options.codec.encode(payloads) : await options.codec.decode(payloads);
        reply(200, { payloads: out.map(toJson) });
      } catch (err) {
        reply(400, { error: { code: 'BAD_PAYLOADS', message: (err as Error).message } });
      }
    };
    // respond() answers every failure itself (400), so the promise it returns is never rejected.
    req.on('end', () => {
      if (!refused) void respond();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8888, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host ?? '127.0.0.1';
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

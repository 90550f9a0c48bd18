import type { AddressInfo, Socket } from 'node:net';
import { Engine, ownerOf, type EngineOptions } from './engine';
import { EmulatorHttpError } from './errors';
import { FaultConfigSchema } from './faults';
import { Router, errorReply, http, isBinaryBody, parseJsonBody, readBody, sendJson, type EmulatorRequest, type JsonReply } from './http';
import { addBasetenRoutes } from './baseten/routes';
import { addTinkerRoutes } from './tinker/routes';
import { addSkyrlTinkerRoutes, skyrlNoRoute } from './tinker/skyrl';
import { addTogetherRoutes } from './together/routes';
import { EmulatorStore } from './store';

export interface EmulatorOptions extends EngineOptions {
  /** 0 picks a free port. */
  port?: number;
  /** Loopback only: 127.0.0.1 unless told otherwise (::1 or localhost also allowed). */
  host?: string;
  /** Fault configuration applied from the start (same shape as POST /_emulator/faults). */
  faults?: unknown;
  /** Persist resources, sessions and checkpoints here, so a restart keeps them. */
  stateDir?: string;
  /** Baseten trainers hold `GET /operations/{id}` this long before answering 408 (default 25 s). */
  basetenPollHoldMs?: number;
  /** Tinker's `retrieve_future` holds an unfinished future this long before answering 408 (default 25 s). */
  tinkerFutureHoldMs?: number;
  /** A Tinker session with no heartbeat for this long expires, and its models with it (default: never). */
  tinkerSessionTtlMs?: number;
  /** Tinker's JWT mode: keys are exchanged at `auth/token` for JWTs of this lifetime, which every other route requires (default: off). */
  tinkerJwtLifetimeSeconds?: number;
  /**
   * Which Tinker-API server `/api/v1` is: hosted Tinker as SDK 0.38 speaks to it (default), or SkyRL 0.4.0's
   * self-hosted one (emulator/tinker/skyrl.ts). With `skyrl`, `tinkerSessionTtlMs` is its session timeout (a session
   * expires only after a first heartbeat) and `tinkerFutureHoldMs` its retrieve_future hold.
   */
  tinkerFlavor?: 'tinker' | 'skyrl';
}

export interface RunningEmulator {
  url: string;
  port: number;
  engine: Engine;
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

function bearerOwner(req: EmulatorRequest): string {
  const header = req.headers.authorization;
  const match = typeof header === 'string' ? /^Bearer\s+(\S+)$/i.exec(header.trim()) : null;
  if (!match) throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'missing or malformed Authorization header; expected "Bearer <api key>"');
  return ownerOf(match[1]!);
}

/** Starts the emulator: every dialect's routes over one engine, plus `/_emulator/*` for the ledger and faults. */
export async function startEmulator(options: EmulatorOptions = {}): Promise<RunningEmulator> {
  const host = options.host ?? '127.0.0.1';
  if (!LOOPBACK.has(host)) throw new Error(`the emulator listens on loopback only; '${host}' is not a loopback address`);
  const engine = new Engine(options);
  const store = options.stateDir ? new EmulatorStore(options.stateDir, engine) : undefined;
  if (store) await store.load();
  if (options.faults !== undefined) engine.faults.configure(options.faults);

  const router = new Router();
  addTogetherRoutes(router, engine, bearerOwner);
  const baseten = addBasetenRoutes(router, engine, { pollHoldMs: options.basetenPollHoldMs });
  const skyrl = options.tinkerFlavor === 'skyrl';
  const tinker = skyrl
    ? {
        ...addSkyrlTinkerRoutes(router, engine, { futureHoldMs: options.tinkerFutureHoldMs, sessionTimeoutMs: options.tinkerSessionTtlMs }),
        issuedJwts: () => [],
      }
    : addTinkerRoutes(router, engine, {
        futureHoldMs: options.tinkerFutureHoldMs,
        sessionTtlMs: options.tinkerSessionTtlMs,
        jwtLifetimeSeconds: options.tinkerJwtLifetimeSeconds,
      });

  const control = new Router()
    .add('GET', '/_emulator/health', () => ({ body: { ok: true } }))
    .add('GET', '/_emulator/ledger', () => ({ body: engine.ledger() }))
    .add('GET', '/_emulator/trained', () => ({ body: engine.trained() }))
    // Tinker's JWT mode: every token auth/token issued, so a test can look for each where no credential may be.
    .add('GET', '/_emulator/tinker/jwts', () => ({ body: { jwts: tinker.issuedJwts() } }))
    .add('GET', '/_emulator/faults', () => ({ body: engine.faults.report() }))
    .add('POST', '/_emulator/faults', (req) => {
      const parsed = FaultConfigSchema.safeParse(req.body ?? {});
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        throw new EmulatorHttpError(
          400,
          'INVALID_ARGUMENT',
          `invalid fault configuration: ${issue.path.join('.') || '(body)'}: ${issue.message}`,
        );
      }
      return { body: engine.faults.configure(parsed.data) };
    })
    .add('DELETE', '/_emulator/faults', () => ({ body: engine.faults.configure({}) }));

  const sockets = new Set<Socket>();
  const server = http.createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://emulator');
      const method = (req.method ?? 'GET').toUpperCase();
      const isControl = url.pathname.startsWith('/_emulator/');
      let reply: JsonReply;
      let loseResponse = false;
      try {
        const bytes = await readBody(req);
        const rawBody = isBinaryBody(req.headers) ? '' : bytes.toString('utf8');
        if (!isControl) {
          const event = { method, path: url.pathname };
          if (engine.faults.latencyMs > 0) await new Promise((r) => setTimeout(r, engine.faults.latencyMs));
          const slow = engine.faults.draw(['delay'], event);
          if (slow) await new Promise((r) => setTimeout(r, slow.delayMs));
          const early = engine.faults.draw(['http-429', 'http-500', 'http-503', 'reset', 'echo-headers'], event);
          if (early?.kind === 'reset') {
            req.socket.destroy();
            return;
          }
          if (early?.kind === 'echo-headers') {
            throw new EmulatorHttpError(
              early.status,
              early.status === 401 ? 'UNAUTHENTICATED' : 'UNAVAILABLE',
              `injected fault: HTTP ${early.status}; the request's headers were ${JSON.stringify(req.headers)}`,
              { 'retry-after-ms': String(early.retryAfterMs) },
            );
          }
          if (early) {
            const status = Number(early.kind.slice(5));
            throw new EmulatorHttpError(status, status === 429 ? 'RESOURCE_EXHAUSTED' : 'UNAVAILABLE', `injected fault: HTTP ${status}`, {
              'retry-after-ms': String(early.retryAfterMs),
            });
          }
          loseResponse = engine.faults.draw(['lose-response'], event) !== undefined;
        }
        const matched = (isControl ? control : router).match(method, url.pathname);
        if (skyrl && typeof matched !== 'object' && url.pathname.startsWith('/api/v1/')) {
          reply = skyrlNoRoute(matched === undefined ? 'not-found' : 'method-not-allowed'); // FastAPI's, as SkyRL answers
          sendJson(res, reply);
          return;
        }
        if (matched === undefined) throw new EmulatorHttpError(404, 'NOT_FOUND', `no route for ${method} ${url.pathname}`);
        if (matched === 'method-not-allowed')
          throw new EmulatorHttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${url.pathname}`);
        const request: EmulatorRequest = {
          method,
          path: url.pathname,
          params: matched.params,
          query: url.searchParams,
          headers: req.headers,
          rawBody,
          bytes,
          body: parseJsonBody(rawBody),
        };
        reply = await matched.handler(request);
      } catch (err) {
        reply = errorReply(err);
      }
      if (loseResponse) {
        req.socket.destroy(); // the work was applied; the caller never hears about it
        return;
      }
      sendJson(res, reply);
    })();
  });
  server.keepAliveTimeout = 30_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}`,
    port,
    engine,
    async close() {
      baseten.close();
      tinker.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      // Saved before the learners are freed: a snapshot taken after would hold no session state.
      await engine.drain();
      await store?.save();
      await engine.close();
    },
  };
}

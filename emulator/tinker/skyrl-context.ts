import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Engine, OperationInput, OperationRecord } from '../engine';
import { ownerOf } from '../engine';
import { EmulatorHttpError } from '../errors';
import type { EmulatorRequest, JsonReply, Router } from '../http';

export interface SkyrlOptions {
  /** How long `retrieve_future` holds an unfinished future before 408 (SkyRL: 300 s; default 25 s). */
  futureHoldMs?: number;
  /** A session heartbeated at least once and silent this long expires, and its models are unloaded (default: never). */
  sessionTimeoutMs?: number;
  /** How often stale sessions are looked for (SkyRL: `--session-cleanup-interval-sec`; default a quarter of the timeout). */
  cleanupIntervalMs?: number;
  /** The model the server serves (SkyRL's `--base-model`). */
  servedModel?: string;
  /** `max_lora_rank` of its backend (the conformance server's: 32). */
  maxLoraRank?: number;
  /** `max_lora_adapters` (named in the capacity failure's text). */
  maxLoraAdapters?: number;
}

export const SKYRL_ID_PATTERN = /^[a-zA-Z0-9_-]+$/;
export const ID_MAX_LENGTH = 255;

export type Outcome = { json: unknown } | { proto: Uint8Array } | { failed: string };

interface Future {
  owner: string;
  promise: Promise<Outcome>;
  outcome?: Outcome;
}

export interface SkyrlSession {
  owner: string;
  status: 'active' | 'expired';
  /** Unset until the first heartbeat: such a session never expires. */
  lastHeartbeatAt?: number;
}

export interface SkyrlModel {
  id: string;
  owner: string;
  sessionId: string;
  /** As the create named it (never checked). */
  baseModel: string;
  rank: number;
  seed: number;
  status: 'created' | 'unloading' | 'unloaded';
  /** Requests after the create: a load is taken only while there are none. */
  requests: number;
  createdAt: number;
  /** The engine model, once placed; rejects when the create failed. */
  ready: Promise<void>;
}

interface SkyrlSampler {
  owner: string;
  modelPath?: string;
  baseModel?: string;
}

/** FastAPI's request validation error: 422 with the list of what failed. */
export class ValidationFailed extends Error {
  constructor(readonly detail: { type: string; loc: (string | number)[]; msg: string; input: unknown }[]) {
    super(detail.map((d) => d.msg).join('; '));
  }
}

export const detail = (status: number, text: string) => new EmulatorHttpError(status, 'SKYRL', text);
export const hex8 = () => randomBytes(4).toString('hex');

/** `tinker://<model>/<weights|sampler_weights>/<name>`, or (SkyRL's named sampler save) `tinker://<model>/<name>`. */
export function parsePath(uri: string): { modelId: string; kind: '' | 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(?:(weights|sampler_weights)\/)?([^/]+)$/.exec(uri);
  return m ? { modelId: m[1]!, kind: (m[2] ?? '') as '' | 'weights' | 'sampler_weights', name: m[3]! } : undefined;
}

export const ModelRef = z.object({ model_id: z.string() });
export const SessionRef = z.object({ session_id: z.string() });

/** A body checked as FastAPI checks it: what fails is answered 422 with `{type, loc, msg, input}` per problem. */
export function validate<T>(schema: z.ZodType<T>, body: unknown): T {
  const parsed = schema.safeParse(body ?? {});
  if (parsed.success) return parsed.data;
  throw new ValidationFailed(
    parsed.error.issues.map((issue) => {
      let input: unknown = body;
      for (const k of issue.path) input = (input as Record<string | number, unknown> | undefined)?.[k as string];
      const missing = issue.code === 'invalid_type' && input === undefined;
      const pattern = issue.code === 'invalid_format';
      return {
        type: missing ? 'missing' : pattern ? 'string_pattern_mismatch' : issue.code,
        loc: ['body', ...issue.path.map((k) => (typeof k === 'symbol' ? String(k) : k))],
        msg: missing ? 'Field required' : pattern ? `String should match pattern '${SKYRL_ID_PATTERN.source}'` : issue.message,
        input: missing ? body : input,
      };
    }),
  );
}

/** An error as FastAPI answers it: `{"detail": …}`. */
function fastApiReply(err: unknown): JsonReply {
  if (err instanceof ValidationFailed) return { status: 422, body: { detail: err.detail } };
  if (err instanceof EmulatorHttpError) return { status: err.status, headers: err.headers, body: { detail: err.message } };
  return { status: 500, body: { detail: `Internal Server Error: ${(err as Error)?.message ?? String(err)}` } };
}

/** The SkyRL flavour's state and the helpers every group of its routes shares (skyrl.ts registers the groups). */
export type SkyrlContext = ReturnType<typeof skyrlContext>;

export function skyrlContext(router: Router, engine: Engine, options: SkyrlOptions) {
  const holdMs = options.futureHoldMs ?? 25_000;
  const served = options.servedModel ?? 'roundhouse/tiny-chat';
  const maxRank = options.maxLoraRank ?? 32;
  const maxAdapters = options.maxLoraAdapters ?? 32;
  const closing = new AbortController();
  const sessions = new Map<string, SkyrlSession>();
  const models = new Map<string, SkyrlModel>();
  const samplers = new Map<string, SkyrlSampler>();
  const futures = new Map<string, Future>();
  /** `(model, seq_id)` → its request: a resend with the same body is the same request. */
  const bySeq = new Map<string, { requestId: string; fingerprint: string }>();
  /** Checkpoint names taken by a save not yet done (`<model>/<kind>/<name>`): a resend meanwhile is a 409 too. */
  const pendingNames = new Set<string>();
  let lastRequestId = 0;
  /** The id of the request made last (a sample keys its engine operation by it). */
  const lastRequest = () => lastRequestId;

  const add = (method: string, path: string, handler: (req: EmulatorRequest, owner: string) => Promise<JsonReply> | JsonReply) =>
    router.add(method, `/api/v1${path}`, async (req) => {
      const key = req.headers['x-api-key'];
      try {
        return await handler(req, ownerOf(typeof key === 'string' ? key : 'skyrl-default'));
      } catch (err) {
        return fastApiReply(err);
      }
    });

  const sessionOf = (id: string, owner: string): SkyrlSession => {
    const s = sessions.get(id);
    if (!s || s.owner !== owner) throw detail(404, 'Session not found');
    return s;
  };
  const modelOf = (id: string, owner: string, notFound = 'Model not found'): SkyrlModel => {
    const m = models.get(id);
    if (!m || m.owner !== owner) throw detail(404, notFound);
    return m;
  };

  /** Unloads a model: its adapter slot is free, and what is sent to it fails ("not loaded"). */
  const unload = (m: SkyrlModel) => {
    m.status = 'unloaded';
    const r = engine.findResource(m.id);
    if (r?.status === 'READY') engine.stopResource(m.id, m.owner, true);
  };

  /** A session ends with its models: after a heartbeat, silence past the timeout; or a model of it lost to a session fault. */
  const expire = (id: string, s: SkyrlSession) => {
    s.status = 'expired';
    for (const m of models.values()) if (m.sessionId === id && m.status !== 'unloaded') unload(m);
  };
  const sweep = () => {
    const now = Date.now();
    for (const [id, s] of sessions) {
      if (s.status !== 'active') continue;
      const silent =
        options.sessionTimeoutMs !== undefined && s.lastHeartbeatAt !== undefined && now - s.lastHeartbeatAt > options.sessionTimeoutMs;
      if (silent) expire(id, s);
    }
  };
  const timer =
    options.sessionTimeoutMs !== undefined
      ? setInterval(sweep, options.cleanupIntervalMs ?? Math.max(50, options.sessionTimeoutMs / 4)).unref()
      : undefined;

  const future = (owner: string, work: () => Promise<Outcome>): string => {
    const requestId = String(++lastRequestId);
    const f: Future = { owner, promise: Promise.resolve({ json: {} }) };
    f.promise = work()
      .catch((err: unknown): Outcome => ({ failed: (err as Error).message }))
      .then((outcome) => (f.outcome = outcome));
    futures.set(requestId, f);
    return requestId;
  };

  /** A failed engine operation as SkyRL words it: a model that is gone is "not loaded"; otherwise the error's text. */
  const failure = (m: SkyrlModel, op: OperationRecord): Outcome => {
    const code = op.error?.code ?? 'INTERNAL_ERROR';
    if (code === 'SESSION_NOT_ACTIVE') {
      const r = engine.findResource(m.id);
      const s = sessions.get(m.sessionId);
      if (s && r?.error?.code === 'SESSION_EXPIRED') expire(m.sessionId, s);
      if (m.status !== 'unloaded') unload(m);
      return { failed: `Model ${m.id} not loaded` };
    }
    return { failed: `${code}: ${op.error?.message ?? 'failed'}` };
  };

  /**
   * One request of a model, submitted to the engine now (so in arrival order, as SkyRL runs them), its future
   * settling with the engine's operation. A `seq` already sent answers with its request (same body) or a 409.
   */
  const submit = (
    owner: string,
    m: SkyrlModel,
    seq: number | undefined,
    fingerprint: string,
    parse: () => OperationInput,
    answer: (op: OperationRecord) => Outcome,
  ): string => {
    if (seq !== undefined) {
      const known = bySeq.get(`${m.id}#${seq}`);
      if (known) {
        if (known.fingerprint !== fingerprint) throw detail(409, 'Training request sequence number was reused');
        const s = engine.findSession(m.id);
        if (s) s.duplicatesAbsorbed += 1;
        return known.requestId;
      }
    }
    m.requests += 1;
    const ready = m.ready;
    const requestId = future(owner, async () => {
      try {
        await ready;
      } catch {
        return { failed: `Model ${m.id} not loaded` };
      }
      if (m.status === 'unloaded') return { failed: `Model ${m.id} not loaded` };
      const op = engine.submitOperation(m.id, owner, `skyrl-${requestId}`, fingerprint, parse, { invalidAs: 'failed-operation' });
      await engine.settled(op, 3_600_000);
      return op.status === 'FAILED' ? failure(m, op) : answer(op);
    });
    if (seq !== undefined) bySeq.set(`${m.id}#${seq}`, { requestId, fingerprint });
    return requestId;
  };

  const checkpointOf = (modelId: string, name: string, kind: 'weights' | 'sampler_weights', owner: string) =>
    engine.findCheckpoint({ resourceId: modelId, name, type: kind === 'weights' ? 'training' : 'inference' }, owner);
  /** A save's name: taken (409) if saved or being saved; held until the save is done. */
  const reserveName = (m: SkyrlModel, name: string, kind: 'weights' | 'sampler_weights', owner: string): (() => void) => {
    const key = `${m.id}/${kind}/${name}`;
    if (pendingNames.has(key) || checkpointOf(m.id, name, kind, owner))
      throw detail(409, `Checkpoint '${name}' already exists for model '${m.id}'`);
    pendingNames.add(key);
    return () => pendingNames.delete(key);
  };

  return {
    engine,
    options,
    holdMs,
    served,
    maxRank,
    maxAdapters,
    closing,
    timer,
    sessions,
    models,
    samplers,
    futures,
    pendingNames,
    lastRequest,
    add,
    sessionOf,
    modelOf,
    unload,
    future,
    failure,
    submit,
    checkpointOf,
    reserveName,
  };
}

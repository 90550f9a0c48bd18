import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { CheckpointRef, Engine, OperationInput, OperationRecord, ResourceRecord } from '../engine';
import { EmulatorHttpError, badRequest, notFound } from '../errors';
import type { EmulatorRequest, JsonReply, Router } from '../http';
import { JwtIssuer, tinkerOwner } from './auth';
import { placeModel } from './operations';

export interface TinkerOptions {
  /** How long `retrieve_future` holds an unfinished future before 408 `try_again` (default 25 s; the SDK waits 45). */
  futureHoldMs?: number;
  /** A session with no heartbeat (or create) for this long expires, and its models with it (default: never). */
  sessionTtlMs?: number;
  /**
   * JWT mode (`client/config` says `pjwt_auth_enabled`): `auth/token` exchanges a key for a JWT of this lifetime, and
   * every other route takes only a JWT, refusing an expired one with `invalid_token` (default: off, keys everywhere).
   */
  jwtLifetimeSeconds?: number;
}

export type Outcome = { json: unknown } | { proto: Uint8Array } | { error: string; category: 'user' | 'server' };

interface Future {
  owner: string;
  type: string;
  promise: Promise<Outcome>;
  outcome?: Outcome;
}

export interface TinkerSession {
  owner: string;
  createdAt: number;
  lastHeartbeatAt: number;
  finished?: { reason: string; detail?: string | null };
  /** Ended by the service (its heartbeats stopped): every model of it is gone. */
  expired?: { at: number; modelId: string };
  tags: string[];
  userMetadata: Record<string, string>;
  displayName?: string;
}

/** A sampling session: the model whose session runs its samples, and the sampler weights it serves. */
interface Sampler {
  owner: string;
  modelId: string;
  checkpoint: CheckpointRef;
  baseModel: string;
  modelPath?: string;
}

export const ModelRef = z.object({ model_id: z.string().min(1, 'model_id is required') }).passthrough();

/** The hosted flavour's state and the helpers every group of its routes shares (routes.ts registers the groups). */
export type TinkerContext = ReturnType<typeof tinkerContext>;

export function tinkerContext(router: Router, engine: Engine, options: TinkerOptions) {
  const holdMs = options.futureHoldMs ?? 25_000;
  const jwt = options.jwtLifetimeSeconds ? new JwtIssuer(options.jwtLifetimeSeconds) : undefined;
  const closing = new AbortController();
  const sessions = new Map<string, TinkerSession>();
  const futures = new Map<string, Future>();
  /** A (model, seq_id) already submitted answers with its first future: resending is not applying twice. */
  const bySeq = new Map<string, string>();
  /** Per model: the next seq_id to run, and who waits for theirs. */
  const order = new Map<string, { next: number; waiting: Map<number, () => void> }>();
  const samplers = new Map<string, Sampler>();

  const add = (method: string, path: string, handler: (req: EmulatorRequest, owner: string) => Promise<JsonReply> | JsonReply) =>
    router.add(method, `/api/v1${path}`, (req) => handler(req, tinkerOwner(req, jwt, path === '/client/config' || path === '/auth/token')));

  const session = (id: string, owner: string): TinkerSession => {
    const s = sessions.get(id);
    if (!s || s.owner !== owner) throw notFound('session', id);
    return expireIfLost(id, s);
  };

  /**
   * A session expires when its heartbeats stopped for `sessionTtlMs`, or when one of its models failed with
   * SESSION_EXPIRED (a fault); its models stop with it.
   */
  const expireIfLost = (id: string, s: TinkerSession): TinkerSession => {
    if (s.expired || s.finished) return s;
    const models = engine
      .listResources({ owner: s.owner, dialect: 'tinker' })
      .filter((r) => (r.extra as { sessionId?: string }).sessionId === id);
    const lost = models.find((r) => r.error?.code === 'SESSION_EXPIRED');
    const silent = options.sessionTtlMs !== undefined && Date.now() - s.lastHeartbeatAt > options.sessionTtlMs;
    if (!lost && !silent) return s;
    s.expired = { at: Date.now(), modelId: lost?.id ?? models[0]?.id ?? '' };
    for (const r of models) if (r.status === 'READY') engine.stopResource(r.id, s.owner, true);
    return s;
  };

  const model = (id: string, owner: string): ResourceRecord => {
    const r = engine.findResource(id);
    if (!r || r.owner !== owner || r.dialect !== 'tinker') throw notFound('model', id);
    const sessionId = (r.extra as { sessionId?: string }).sessionId;
    const s = sessionId ? sessions.get(sessionId) : undefined;
    if (sessionId && s) expireIfLost(sessionId, s); // a model of an expired session is gone with it
    return r;
  };

  const future = (owner: string, type: string, work: () => Promise<Outcome>): { request_id: string } => {
    const requestId = `req-${randomUUID()}`;
    const f: Future = { owner, type, promise: Promise.resolve() as unknown as Promise<Outcome> };
    f.promise = work()
      .catch((err: unknown): Outcome => {
        const http = err instanceof EmulatorHttpError ? err : undefined;
        return { error: (err as Error).message, category: http && http.status < 500 ? 'user' : 'server' };
      })
      .then((outcome) => (f.outcome = outcome));
    futures.set(requestId, f);
    return { request_id: requestId };
  };

  /** Resolves when `seq` is the model's next operation; `done()` then lets the one after it go. */
  const turn = async (modelId: string, seq: number): Promise<() => void> => {
    const o = order.get(modelId) ?? { next: 1, waiting: new Map<number, () => void>() };
    order.set(modelId, o);
    if (seq < o.next) throw badRequest(`seq_id ${seq} of model ${modelId} is behind its next operation (${o.next})`);
    if (seq > o.next) await new Promise<void>((resolve) => o.waiting.set(seq, resolve));
    return () => {
      o.next = seq + 1;
      const wake = o.waiting.get(o.next);
      o.waiting.delete(o.next);
      wake?.();
    };
  };

  /** An operation of a model, in seq_id order, as a future: its engine operation settles it. */
  const sequenced = (
    owner: string,
    modelId: string,
    seq: number,
    type: string,
    fingerprint: string,
    parse: () => OperationInput,
    answer: (op: OperationRecord) => Outcome,
  ): { request_id: string; model_id: string } => {
    const known = bySeq.get(`${modelId}#${seq}`);
    if (known) {
      // A resent seq_id is the operation already submitted: absorbed, as a resent idempotency key is elsewhere.
      const s = engine.findSession(modelId);
      if (s) s.duplicatesAbsorbed += 1;
      return { request_id: known, model_id: modelId };
    }
    const submitted = future(owner, type, async () => {
      const done = await turn(modelId, seq);
      let op: OperationRecord;
      try {
        op = engine.submitOperation(modelId, owner, `seq-${seq}`, fingerprint, parse, { invalidAs: 'failed-operation' });
      } finally {
        done();
      }
      await engine.settled(op, 3_600_000);
      if (op.status === 'FAILED') return failedOutcome(op);
      return answer(op);
    });
    bySeq.set(`${modelId}#${seq}`, submitted.request_id);
    return { ...submitted, model_id: modelId };
  };

  /** A LoRA model of a session, `<session>:train:<seq>`, with its engine session; from a checkpoint when given. */
  const createModel = async (
    owner: string,
    sessionId: string,
    modelSeq: number,
    baseModel: string,
    lora: { rank: number; seed?: number },
    from?: { checkpointId: string; optimizer: boolean },
    userMetadata?: Record<string, unknown>,
  ): Promise<string> => {
    const id = `${sessionId}:train:${modelSeq}`;
    if (engine.findResource(id)) return id;
    await placeModel(engine, { id, owner, sessionId, baseModel, lora, from, userMetadata });
    order.set(id, { next: 1, waiting: new Map() });
    return id;
  };

  return {
    engine,
    holdMs,
    jwt,
    closing,
    sessions,
    futures,
    bySeq,
    samplers,
    add,
    session,
    expireIfLost,
    model,
    future,
    sequenced,
    createModel,
  };
}

/** A failed operation as the future answers it: a bad input is the caller's error, anything else the service's. */
export function failedOutcome(op: OperationRecord): Outcome {
  const code = op.error?.code ?? 'INTERNAL_ERROR';
  return { error: `${code}: ${op.error?.message ?? 'failed'}`, category: code === 'INVALID_INPUT' ? 'user' : 'server' };
}

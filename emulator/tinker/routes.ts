import { createHash, createHmac, randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { CheckpointRef, Engine, OperationInput, OperationRecord, ResourceRecord } from '../engine';
import { ownerOf } from '../engine';
import { EmulatorHttpError, badRequest, notFound } from '../errors';
import { EMULATED_MODELS, findModel } from '../models';
import type { EmulatorRequest, JsonReply, Router } from '../http';
import { parseForward } from '../baseten/requests';
import { parseBody, parseOptimStep } from '../together/requests';
import { decodeForwardBackwardRequest, encodeForwardBackwardOutput, encodeSampleResponse, type ForwardBackwardRequest } from './proto';

/**
 * Tinker's training wire (providers/tinker/WIRE.md), as the official SDK 0.38.0 speaks it, on the shared engine:
 * `/api/v1/...` under the service's base URL, `X-API-Key: tml-…`, operations answered with a future
 * (`{request_id}`) that `retrieve_future` long-polls (408 `try_again` while pending), forward-backward bodies and
 * results in protobuf. A Tinker session is a client's container; a model (`<session>:train:<n>`) is an engine
 * resource of dialect `tinker` with one engine session of the same id, ready at once (the service is serverless).
 * Each model's operations run in `seq_id` order: one that arrives early waits for the gap to fill.
 * Sampling runs on the model that saved the sampler weights, from those weights (a sampling session names them).
 * REST: runs (training_runs, with their checkpoints) and sessions, listed and read.
 * Not yet served: sampling a base model without an adapter, stop strings, deleting checkpoints.
 */

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

type Outcome = { json: unknown } | { proto: Uint8Array } | { error: string; category: 'user' | 'server' };

interface Future {
  owner: string;
  type: string;
  promise: Promise<Outcome>;
  outcome?: Outcome;
}

interface TinkerSession {
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

/** `X-API-Key: tml-…` (or a JWT from `auth/token`) is the SDK's only auth header; the owner derives from the key. */
function tinkerOwner(req: EmulatorRequest, jwt: JwtIssuer | undefined, keyAllowed: boolean): string {
  const key = req.headers['x-api-key'];
  if (typeof key !== 'string' || !(key.startsWith('tml-') || key.startsWith('eyJ')))
    throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'missing or malformed X-API-Key header; expected "tml-…"');
  if (key.startsWith('eyJ')) {
    if (!jwt) throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'JWTs are not issued here: client/config leaves pjwt_auth_enabled off');
    return jwt.verify(key);
  }
  if (jwt && !keyAllowed)
    throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'this service takes a JWT from /api/v1/auth/token', {
      'www-authenticate': 'Bearer error="invalid_token"',
    });
  return ownerOf(key);
}

/** HS256 JWTs naming the key's owner, signed with a secret of this emulator's. */
class JwtIssuer {
  private readonly secret = randomUUID();
  /** Every token issued, in order (tests look for them where no credential may be). */
  readonly issued: string[] = [];
  constructor(private readonly lifetimeSeconds: number) {}

  issue(owner: string): string {
    const now = Math.floor(Date.now() / 1000);
    const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: owner, iat: now, exp: now + this.lifetimeSeconds })}`;
    const token = `${unsigned}.${createHmac('sha256', this.secret).update(unsigned).digest('base64url')}`;
    this.issued.push(token);
    return token;
  }

  verify(token: string): string {
    const [header, payload, signature] = token.split('.');
    const invalid = (why: string) =>
      new EmulatorHttpError(401, 'UNAUTHENTICATED', `invalid token: ${why}`, { 'www-authenticate': 'Bearer error="invalid_token"' });
    if (!header || !payload || !signature) throw invalid('malformed');
    if (createHmac('sha256', this.secret).update(`${header}.${payload}`).digest('base64url') !== signature) throw invalid('bad signature');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sub: string; exp: number };
    if (claims.exp <= Date.now() / 1000) throw invalid('expired');
    return claims.sub;
  }
}

const CreateSessionBody = z
  .object({
    tags: z.array(z.string()).nullish(),
    user_metadata: z.record(z.string(), z.unknown()).nullish(),
    display_name: z.string().nullish(),
  })
  .passthrough();
const SearchSessionsBody = z
  .object({
    session_id: z.string().nullish(),
    user_metadata: z.record(z.string(), z.string()).default({}),
    display_name: z.string().min(1).nullish(),
    statuses: z
      .array(z.object({ type: z.enum(['active', 'cancelled', 'failed', 'client_finished']) }).passthrough())
      .min(1)
      .nullish(),
    limit: z.number().int().min(1).max(200).default(50),
    cursor: z.object({ last_created_at: z.string(), last_session_id: z.string() }).nullish(),
  })
  .passthrough();
const SessionRef = z.object({ session_id: z.string().min(1, 'session_id is required') }).passthrough();
const CreateModelBody = z
  .object({
    session_id: z.string().min(1, 'session_id is required'),
    model_seq_id: z.number().int().min(0),
    base_model: z.string().min(1, 'base_model is required'),
    lora_config: z.object({ rank: z.number().int().min(1), seed: z.number().int().nullish() }).passthrough(),
    user_metadata: z.record(z.string(), z.unknown()).nullish(),
  })
  .passthrough();
const ModelRef = z.object({ model_id: z.string().min(1, 'model_id is required') }).passthrough();
const SeqOp = ModelRef.extend({ seq_id: z.number().int().min(1, 'seq_id must be ≥ 1 (0 is the model’s create)') });
const CheckpointName = z
  .string()
  .min(1, 'path is required')
  .regex(/^[^/]+$/, 'a checkpoint name cannot contain "/" (it becomes tinker://<model>/weights/<name>)');
const SaveWeightsBody = SeqOp.extend({ path: CheckpointName, ttl_seconds: z.number().int().nullish() });
const LoadWeightsBody = z
  .object({
    path: z.string().min(1, 'path is required'),
    optimizer: z.boolean().default(false),
    model_id: z.string().nullish(),
    seq_id: z.number().int().nullish(),
    session_id: z.string().nullish(),
    model_seq_id: z.number().int().nullish(),
  })
  .passthrough();
const RetrieveBody = z.object({ request_id: z.string().min(1, 'request_id is required') }).passthrough();
const SamplerWeightsBody = SeqOp.extend({
  path: CheckpointName.nullish(),
  sampling_session_seq_id: z.number().int().min(0).nullish(),
  ttl_seconds: z.number().int().nullish(),
});
const CreateSamplingSessionBody = z
  .object({
    session_id: z.string().min(1, 'session_id is required'),
    sampling_session_seq_id: z.number().int().min(0),
    model_path: z.string().nullish(),
    base_model: z.string().nullish(),
  })
  .passthrough();
export const SampleBody = z
  .object({
    sampling_session_id: z.string().min(1, 'sampling_session_id is required'),
    seq_id: z.number().int().min(0),
    num_samples: z.number().int().min(1).max(64).default(1),
    prompt: z.object({
      chunks: z.array(z.object({ type: z.string().optional(), tokens: z.array(z.number().int()).optional() }).passthrough()),
    }),
    sampling_params: z
      .object({
        max_tokens: z.number().int().min(1).nullish(),
        seed: z.number().int().nullish(),
        stop: z.union([z.string(), z.array(z.string()), z.array(z.number().int())]).nullish(),
        temperature: z.number().min(0).default(1),
        top_k: z.number().int().default(-1),
        top_p: z.number().gt(0).max(1).default(1),
      })
      .passthrough(),
    prompt_logprobs: z.boolean().default(false),
    topk_prompt_logprobs: z.number().int().default(0),
  })
  .passthrough();

/** A sampling session: the model whose session runs its samples, and the sampler weights it serves. */
interface Sampler {
  owner: string;
  modelId: string;
  checkpoint: CheckpointRef;
  baseModel: string;
  modelPath?: string;
}

/** `tinker://<model id>/weights/<name>` (training state) or `…/sampler_weights/<name>`. */
export function parseTinkerPath(uri: string): { modelId: string; kind: 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(weights|sampler_weights)\/([^/]+)$/.exec(uri);
  return m ? { modelId: m[1]!, kind: m[2] as 'weights' | 'sampler_weights', name: m[3]! } : undefined;
}

/**
 * A Tinker model on the engine: a resource of dialect `tinker` (ready at once: the service is serverless, unless a
 * capacity fault holds it) with one engine session of the same id, from a checkpoint when given. A model that cannot
 * be placed throws a 503.
 */
export async function placeModel(
  engine: Engine,
  m: {
    id: string;
    owner: string;
    sessionId: string;
    baseModel: string;
    lora: { rank: number; seed?: number };
    from?: { checkpointId: string; optimizer: boolean };
    userMetadata?: Record<string, unknown>;
  },
): Promise<void> {
  const r = engine.createResource({
    id: m.id,
    dialect: 'tinker',
    owner: m.owner,
    baseModel: m.baseModel,
    numGeneratorReplicas: 0,
    extra: { kind: 'model', sessionId: m.sessionId, userMetadata: m.userMetadata ?? {} },
  });
  while (r.status === 'PENDING' || r.status === 'CREATING') {
    await new Promise((resolve) => setTimeout(resolve, 20));
    engine.refreshAround(m.id);
  }
  if (r.status !== 'READY')
    throw new EmulatorHttpError(503, 'UNAVAILABLE', `model ${m.id} could not be placed (${r.status.toLowerCase()})`);
  await engine.createSession({
    id: m.id,
    resourceId: m.id,
    owner: m.owner,
    lora: { rank: Math.min(m.lora.rank, r.model.maxLoraRank), ...(m.lora.seed !== undefined ? { seed: m.lora.seed } : {}) },
    ...(m.from ? { resumeFromCheckpointId: m.from.checkpointId, loadOptimizer: m.from.optimizer } : {}),
  });
}

export function addTinkerRoutes(router: Router, engine: Engine, options: TinkerOptions = {}): { close(): void; issuedJwts(): string[] } {
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

  // ── bootstrap and sessions ──────────────────────────────────────────────────────────────────────────

  add('GET', '/healthz', () => ({ body: { status: 'ok' } }));
  // Every flag at the SDK's default (no zstd), and JWTs only in JWT mode.
  add('POST', '/client/config', () => ({ body: jwt ? { pjwt_auth_enabled: true } : {} }));
  add('POST', '/auth/token', (req, owner) => {
    if (!jwt) throw notFound('route', '/api/v1/auth/token');
    if (String(req.headers['x-api-key']).startsWith('eyJ')) throw badRequest('exchange the API key, not a JWT');
    return { body: { jwt: jwt.issue(owner) } };
  });
  add('POST', '/client/dynamic_config', () => ({ body: { refresh_interval_sec: 300 } }));
  add('POST', '/telemetry', () => ({ body: { status: 'accepted' } }));
  add('GET', '/get_server_capabilities', () => ({
    body: {
      supported_models: EMULATED_MODELS.map((m) => ({
        model_name: m.name,
        max_context_length: m.contextLength,
        trainable: true,
        sampleable: true,
        // Not in the service's schema (the SDK ignores them): the limits a client checks a spec against.
        max_lora_rank: m.maxLoraRank,
        vocab_size: m.vocabSize,
      })),
    },
  }));

  add('POST', '/create_session', (req, owner) => {
    const b = parseBody(CreateSessionBody, req.body, 'create_session');
    const id = randomUUID();
    sessions.set(id, {
      owner,
      createdAt: Date.now(),
      lastHeartbeatAt: Date.now(),
      tags: b.tags ?? [],
      userMetadata: Object.fromEntries(Object.entries(b.user_metadata ?? {}).map(([k, v]) => [k, String(v)])),
      ...(b.display_name ? { displayName: b.display_name } : {}),
    });
    return { body: { session_id: id, type: 'create_session' } };
  });

  add('POST', '/session_heartbeat', (req, owner) => {
    const s = session(parseBody(SessionRef, req.body, 'session_heartbeat').session_id, owner);
    // A finished (or expired) session answers 410, which stops the SDK's heartbeats.
    if (s.finished) throw new EmulatorHttpError(410, 'SESSION_FINISHED', 'this session has finished');
    if (s.expired) throw new EmulatorHttpError(410, 'SESSION_EXPIRED', 'this session has expired');
    s.lastHeartbeatAt = Date.now();
    return { body: { type: 'session_heartbeat' } };
  });

  add('POST', '/sessions/:id/finish', (req, owner) => {
    const s = session(req.params.id!, owner);
    const body = (req.body ?? {}) as { reason?: { type?: string }; detail?: string | null };
    s.finished ??= { reason: body.reason?.type ?? 'success', detail: body.detail };
    // A finished session's models are let go: nothing of it stays loaded (or on the ledger as active).
    for (const r of engine.listResources({ owner, dialect: 'tinker' }))
      if ((r.extra as { sessionId?: string }).sessionId === req.params.id && r.status === 'READY') engine.stopResource(r.id, owner, true);
    return { body: {} };
  });

  // ── models ──────────────────────────────────────────────────────────────────────────────────────────

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

  add('POST', '/create_model', (req, owner) => {
    const b = parseBody(CreateModelBody, req.body, 'create_model');
    session(b.session_id, owner);
    const base = findModel(b.base_model);
    if (!base) throw badRequest(`base_model '${b.base_model}' is not supported; see GET /api/v1/get_server_capabilities`);
    if (b.lora_config.rank > base.maxLoraRank)
      throw badRequest(`lora_config.rank ${b.lora_config.rank} is over ${base.name}'s maximum of ${base.maxLoraRank}`);
    const id = `${b.session_id}:train:${b.model_seq_id}`;
    const known = bySeq.get(`${id}#0`);
    if (known) return { body: { request_id: known, model_id: id } };
    const lora = { rank: b.lora_config.rank, ...(typeof b.lora_config.seed === 'number' ? { seed: b.lora_config.seed } : {}) };
    const f = future(owner, 'CreateModel', async () => ({
      json: {
        model_id: await createModel(owner, b.session_id, b.model_seq_id, b.base_model, lora, undefined, b.user_metadata ?? undefined),
        type: 'create_model',
      },
    }));
    bySeq.set(`${id}#0`, f.request_id);
    return { body: { ...f, model_id: id } };
  });

  add('POST', '/get_info', (req, owner) => {
    const r = model(parseBody(ModelRef, req.body, 'get_info').model_id, owner);
    const s = engine.findSession(r.id);
    return {
      body: {
        type: 'get_info',
        model_id: r.id,
        model_data: { arch: 'roundhouse-emulator', model_name: r.model.name, tokenizer_id: r.model.name },
        is_lora: true,
        lora_rank: s?.lora.rank ?? null,
        model_name: r.model.name,
      },
    };
  });

  add('POST', '/unload_model', (req, owner) => {
    const r = model(parseBody(ModelRef, req.body, 'unload_model').model_id, owner);
    return {
      body: future(
        owner,
        'UnloadModel',
        async () => (engine.stopResource(r.id, owner, true), { json: { model_id: r.id, type: 'unload_model' } }),
      ),
    };
  });

  // ── training operations ─────────────────────────────────────────────────────────────────────────────

  add('POST', '/forward_backward', (req, owner) => {
    if (!/application\/x-protobuf/i.test(String(req.headers['content-type'] ?? '')))
      throw badRequest('forward_backward takes a ForwardBackwardRequest protobuf (Content-Type: application/x-protobuf)');
    if (req.headers['content-encoding'])
      throw badRequest(`Content-Encoding ${req.headers['content-encoding']} is not served: /client/config leaves zstd off`);
    const fb = decodeForwardBackwardRequest(req.bytes);
    const r = model(fb.modelId, owner);
    if (fb.seqId < 1) throw badRequest('seq_id must be ≥ 1 (0 is the model’s create)');
    const fingerprint = `forward_backward\n${createHash('sha256').update(req.bytes).digest('hex')}`;
    return {
      body: sequenced(
        owner,
        r.id,
        fb.seqId,
        fb.forwardOnly ? 'Forward' : 'ForwardBackward',
        fingerprint,
        () => forwardInput(fb, r),
        (op) => {
          const o = op.output;
          if (o?.kind !== 'forward-backward') return { error: 'no forward result', category: 'server' };
          return {
            proto: encodeForwardBackwardOutput({ outputs: o.logprobs.map((lp) => ({ logprobs: lp })), metrics: { 'loss:sum': o.loss } }),
          };
        },
      ),
    };
  });

  add('POST', '/optim_step', (req, owner) => {
    const b = parseBody(SeqOp, req.body, 'optim_step');
    const r = model(b.model_id, owner);
    return {
      body: sequenced(
        owner,
        r.id,
        b.seq_id,
        'OptimStep',
        `optim_step\n${req.rawBody}`,
        () => parseOptimStep(req.body),
        (op) => {
          const o = op.output;
          return {
            json: { metrics: o?.kind === 'optim-step' ? { 'step:max': o.step, 'grad_norm:mean': o.gradNorm } : {}, type: 'optim_step' },
          };
        },
      ),
    };
  });

  add('POST', '/save_weights', (req, owner) => {
    const b = parseBody(SaveWeightsBody, req.body, 'save_weights');
    const r = model(b.model_id, owner);
    return {
      body: sequenced(
        owner,
        r.id,
        b.seq_id,
        'SaveWeights',
        `save_weights\n${req.rawBody}`,
        () => ({ kind: 'training-checkpoint', name: b.path }),
        () => ({ json: { path: `tinker://${r.id}/weights/${b.path}`, type: 'save_weights' } }),
      ),
    };
  });

  /** The engine checkpoint a `tinker://…/weights/<name>` path names (only training state can be loaded). */
  const trainingCheckpoint = (uri: string, owner: string): string => {
    const path = parseTinkerPath(uri);
    if (!path) throw badRequest(`path '${uri}' is not tinker://<model id>/weights/<name>`);
    if (path.kind !== 'weights') throw badRequest(`${uri}: sampler weights cannot be loaded to train (save_state makes a weights/ path)`);
    const c = engine.findCheckpoint({ resourceId: path.modelId, name: path.name, type: 'training' }, owner);
    if (!c) throw notFound('checkpoint', uri);
    return c.id;
  };

  add('POST', '/load_weights', (req, owner) => {
    const b = parseBody(LoadWeightsBody, req.body, 'load_weights');
    if (b.session_id) {
      // Create-via-load: the model is made from the checkpoint (its LoRA settings with it) under the id the SDK expects.
      session(b.session_id, owner);
      const seq = b.model_seq_id ?? 0;
      const id = `${b.session_id}:train:${seq}`;
      const known = bySeq.get(`${id}#0`);
      if (known) return { body: { request_id: known, model_id: id } };
      const checkpointId = trainingCheckpoint(b.path, owner);
      const c = engine.getCheckpoint(checkpointId, owner);
      const source = engine.findResource(c.resourceId);
      const f = future(owner, 'LoadWeights', async () => {
        await createModel(
          owner,
          b.session_id!,
          seq,
          source?.model.name ?? c.baseModel,
          { rank: c.loraRank },
          { checkpointId, optimizer: b.optimizer },
        );
        return { json: { model_id: id, path: b.path, type: 'load_weights' } };
      });
      bySeq.set(`${id}#0`, f.request_id);
      return { body: { ...f, model_id: id } };
    }
    if (!b.model_id || b.seq_id === undefined || b.seq_id === null)
      throw badRequest('load_weights needs model_id and seq_id, or session_id and model_seq_id');
    const r = model(b.model_id, owner);
    const checkpointId = trainingCheckpoint(b.path, owner);
    return {
      body: sequenced(
        owner,
        r.id,
        b.seq_id,
        'LoadWeights',
        `load_weights\n${req.rawBody}`,
        () => ({ kind: 'load-checkpoint', checkpoint: { id: checkpointId }, optimizer: b.optimizer }),
        () => ({ json: { model_id: r.id, path: b.path, type: 'load_weights' } }),
      ),
    };
  });

  // ── sampling ────────────────────────────────────────────────────────────────────────────────────────

  /** Sampler weights: named (`tinker://<model>/sampler_weights/<name>`), or unnamed for a sampling session of its own. */
  add('POST', '/save_weights_for_sampler', (req, owner) => {
    const b = parseBody(SamplerWeightsBody, req.body, 'save_weights_for_sampler');
    const r = model(b.model_id, owner);
    const sessionId = (r.extra as { sessionId?: string }).sessionId ?? '';
    if (!b.path && (b.sampling_session_seq_id === undefined || b.sampling_session_seq_id === null))
      throw badRequest('save_weights_for_sampler needs a path (a name) or a sampling_session_seq_id');
    const name = b.path ?? `ephemeral-${b.seq_id}`;
    return {
      body: sequenced(
        owner,
        r.id,
        b.seq_id,
        'SaveWeightsForSampler',
        `save_weights_for_sampler\n${req.rawBody}`,
        () => ({ kind: 'inference-checkpoint', name }),
        (op) => {
          const o = op.output;
          if (o?.kind !== 'inference-checkpoint') return { error: 'no checkpoint', category: 'server' };
          if (b.path) return { json: { path: `tinker://${r.id}/sampler_weights/${b.path}`, type: 'save_weights_for_sampler' } };
          const id = `${sessionId}:sample:${b.sampling_session_seq_id}`;
          samplers.set(id, { owner, modelId: r.id, checkpoint: { id: o.checkpointId }, baseModel: r.model.name });
          return { json: { sampling_session_id: id, type: 'save_weights_for_sampler' } };
        },
      ),
    };
  });

  add('POST', '/create_sampling_session', (req, owner) => {
    const b = parseBody(CreateSamplingSessionBody, req.body, 'create_sampling_session');
    session(b.session_id, owner);
    const id = `${b.session_id}:sample:${b.sampling_session_seq_id}`;
    if (!b.model_path) throw badRequest('sampling a base model without an adapter is not served by this emulator: pass model_path');
    const path = parseTinkerPath(b.model_path);
    if (!path) throw badRequest(`model_path '${b.model_path}' is not tinker://<model id>/<weights|sampler_weights>/<name>`);
    const source = model(path.modelId, owner);
    const ref: CheckpointRef = { resourceId: path.modelId, name: path.name, type: path.kind === 'weights' ? 'training' : 'inference' };
    const c = engine.findCheckpoint(ref, owner);
    if (!c) throw notFound('checkpoint', b.model_path);
    samplers.set(id, { owner, modelId: source.id, checkpoint: { id: c.id }, baseModel: source.model.name, modelPath: b.model_path });
    return { body: { sampling_session_id: id, type: 'create_sampling_session' } };
  });

  add('GET', '/samplers/:id', (req, owner) => {
    const sampler = samplers.get(req.params.id!);
    if (!sampler || sampler.owner !== owner) throw notFound('sampler', req.params.id!);
    return {
      body: { sampler_id: req.params.id, base_model: sampler.baseModel, ...(sampler.modelPath ? { model_path: sampler.modelPath } : {}) },
    };
  });

  add('POST', '/asample', (req, owner) => {
    const b = parseBody(SampleBody, req.body, 'asample');
    const sampler = samplers.get(b.sampling_session_id);
    if (!sampler || sampler.owner !== owner) throw notFound('sampling session', b.sampling_session_id);
    const r = model(sampler.modelId, owner);
    const input = sampleInput(b, sampler.checkpoint);
    const key = `sample-${b.sampling_session_id}-${b.seq_id}`;
    const submitted = future(owner, 'Sample', async () => {
      const op = engine.submitOperation(r.id, owner, key, `asample\n${req.rawBody}`, () => input, { invalidAs: 'failed-operation' });
      await engine.settled(op, 3_600_000);
      if (op.status === 'FAILED') return failedOutcome(op);
      const result = op.output?.kind === 'sample' ? op.output.results[0] : undefined;
      if (!result) return { error: 'no samples', category: 'server' };
      return {
        proto: encodeSampleResponse({
          sequences: result.sequences.map((q) => ({ tokens: q.tokens, logprobs: q.logprobs, stopReason: q.stopReason })),
          ...(b.prompt_logprobs && result.promptLogprobs
            ? { promptLogprobs: result.promptLogprobs.map((v, k) => (k === 0 ? null : v)) }
            : {}),
        }),
      };
    });
    // One id per sample: the SDK checks that the result holds as many sequences.
    const ids = Array.from({ length: b.num_samples }, (_v, i) => `${b.sampling_session_id}:${b.seq_id}:${i}`);
    return { body: { ...submitted, sample_sequence_ids: ids } };
  });

  // ── REST: runs, their checkpoints, sessions ─────────────────────────────────────────────────────────

  const iso = (ms: number) => new Date(ms).toISOString();
  const checkpointJson = (c: { type: 'training' | 'inference'; name?: string; id: string; resourceId: string; createdAt: number }) => {
    const kind = c.type === 'training' ? 'weights' : 'sampler_weights';
    const name = c.name ?? c.id;
    return {
      checkpoint_id: `${kind}/${name}`,
      checkpoint_type: c.type === 'training' ? 'training' : 'sampler',
      time: iso(c.createdAt),
      tinker_path: `tinker://${c.resourceId}/${kind}/${name}`,
      public: false,
    };
  };
  const checkpointsOf = (r: ResourceRecord, owner: string) =>
    engine
      .listCheckpoints({ owner })
      .filter((c) => c.resourceId === r.id)
      .sort((a, b) => b.createdAt - a.createdAt);
  const runJson = (r: ResourceRecord, owner: string) => {
    const saved = checkpointsOf(r, owner);
    const last = (type: 'training' | 'inference') => saved.find((c) => c.type === type);
    const s = engine.findSession(r.id);
    const training = last('training');
    const sampler = last('inference');
    return {
      training_run_id: r.id,
      base_model: r.model.name,
      model_owner: owner,
      is_lora: true,
      corrupted: false,
      lora_rank: s?.lora.rank ?? null,
      last_request_time: iso(r.lastActivityAt),
      ...(training ? { last_checkpoint: checkpointJson(training) } : {}),
      ...(sampler ? { last_sampler_checkpoint: checkpointJson(sampler) } : {}),
      user_metadata: (r.extra as { userMetadata?: Record<string, unknown> }).userMetadata ?? {},
      // Not in the service's schema: whether the model is still loaded (a finished session's are not).
      status: r.status === 'READY' ? 'active' : r.status.toLowerCase(),
    };
  };
  const page = (req: EmulatorRequest, defaultLimit: number) => {
    const limit = Number(req.query.get('limit') ?? defaultLimit);
    const offset = Number(req.query.get('offset') ?? 0);
    if (!Number.isInteger(limit) || limit < 1 || !Number.isInteger(offset) || offset < 0)
      throw badRequest('limit must be a positive integer and offset an integer ≥ 0');
    return { limit, offset };
  };

  add('GET', '/training_runs', (req, owner) => {
    const { limit, offset } = page(req, 20);
    const runs = engine.listResources({ owner, dialect: 'tinker' });
    return {
      body: {
        training_runs: runs.slice(offset, offset + limit).map((r) => runJson(r, owner)),
        cursor: { offset, limit, total_count: runs.length },
      },
    };
  });

  add('GET', '/training_runs/:run', (req, owner) => ({ body: runJson(model(req.params.run!, owner), owner) }));

  add('GET', '/training_runs/:run/checkpoints', (req, owner) => ({
    body: { checkpoints: checkpointsOf(model(req.params.run!, owner), owner).map(checkpointJson) },
  }));

  /** `checkpoint_id` is the path after the run: `weights/<name>` or `sampler_weights/<name>`. Deleting one gone is a 404. */
  add('DELETE', '/training_runs/:run/checkpoints/:kind/:name', (req, owner) => {
    const r = model(req.params.run!, owner);
    const kind = req.params.kind;
    if (kind !== 'weights' && kind !== 'sampler_weights') throw badRequest(`checkpoint kind '${kind}' is not weights or sampler_weights`);
    const c = engine.findCheckpoint(
      { resourceId: r.id, name: req.params.name!, type: kind === 'weights' ? 'training' : 'inference' },
      owner,
    );
    if (!c) throw notFound('checkpoint', `${kind}/${req.params.name}`);
    engine.deleteCheckpoint(c.id, owner);
    return { body: {} };
  });

  add('GET', '/sessions', (req, owner) => {
    const { limit, offset } = page(req, 20);
    const mine = [...sessions].filter(([, s]) => s.owner === owner).sort((a, b) => b[1].createdAt - a[1].createdAt);
    return { body: { sessions: mine.slice(offset, offset + limit).map(([id]) => id) } };
  });

  add('GET', '/sessions/:id', (req, owner) => {
    const s = session(req.params.id!, owner);
    const runs = engine
      .listResources({ owner, dialect: 'tinker' })
      .filter((r) => (r.extra as { sessionId?: string }).sessionId === req.params.id);
    const samplerIds = [...samplers].filter(([id, x]) => x.owner === owner && id.startsWith(`${req.params.id}:sample:`)).map(([id]) => id);
    return {
      body: {
        training_run_ids: runs.map((r) => r.id),
        sampler_ids: samplerIds,
        user_metadata: s.userMetadata,
        ...(s.displayName ? { display_name: s.displayName } : {}),
      },
    };
  });

  /** A session as `sessions/search` summarises it: its status is active until its client finishes it. */
  const summary = (id: string, s: TinkerSession) => ({
    session_id: id,
    created_at: iso(s.createdAt),
    owner: s.owner,
    project_id: 'default',
    status: s.finished
      ? { type: 'client_finished', reason: { type: s.finished.reason }, detail: s.finished.detail ?? null }
      : s.expired
        ? {
            type: 'failed',
            category: 'internal',
            reason: { type: 'training_run', training_run_id: s.expired.modelId },
            message: 'the session expired',
          }
        : { type: 'active' },
    checkpoints_count: engine
      .listCheckpoints({ owner: s.owner })
      .filter((c) => (engine.findResource(c.resourceId)?.extra as { sessionId?: string } | undefined)?.sessionId === id).length,
    ...(s.displayName ? { display_name: s.displayName } : {}),
    user_metadata: s.userMetadata,
  });

  /** The caller's sessions, newest first, filtered by id, metadata, display name and status; paged by a cursor. */
  add('POST', '/sessions/search', (req, owner) => {
    const b = parseBody(SearchSessionsBody, req.body, 'sessions/search');
    const matches = [...sessions]
      .filter(([id, s]) => {
        if (s.owner !== owner) return false;
        const byName = b.display_name ? (s.displayName ?? '').toLowerCase().includes(b.display_name.toLowerCase()) : undefined;
        const byId = b.session_id ? id === b.session_id : undefined;
        if ((byName ?? byId) !== undefined && !(byName || byId)) return false;
        if (Object.entries(b.user_metadata).some(([k, v]) => s.userMetadata[k] !== v)) return false;
        expireIfLost(id, s);
        const status = s.finished ? 'client_finished' : s.expired ? 'failed' : 'active';
        return !b.statuses || b.statuses.some((q) => q.type === status);
      })
      .sort((x, y) => y[1].createdAt - x[1].createdAt || (y[0] < x[0] ? -1 : 1));
    let start = 0;
    if (b.cursor) {
      const i = matches.findIndex(([id]) => id === b.cursor!.last_session_id);
      start = i < 0 ? matches.length : i + 1;
    }
    const pageItems = matches.slice(start, start + b.limit);
    const last = pageItems[pageItems.length - 1];
    const more = start + b.limit < matches.length;
    return {
      body: {
        sessions: pageItems.map(([id, s]) => summary(id, s)),
        next_cursor: more && last ? { last_created_at: iso(last[1].createdAt), last_session_id: last[0] } : null,
      },
    };
  });

  // ── futures ─────────────────────────────────────────────────────────────────────────────────────────

  add('POST', '/retrieve_future', async (req, owner) => {
    const { request_id: id } = parseBody(RetrieveBody, req.body, 'retrieve_future');
    const f = futures.get(id);
    if (!f || f.owner !== owner) throw notFound('future', id);
    if (!f.outcome) await holdFor(f.promise, holdMs, closing.signal);
    const outcome = f.outcome;
    if (!outcome) return { status: 408, body: { type: 'try_again', request_id: id, queue_state: 'active' } };
    if ('proto' in outcome) return { body: undefined, bytes: outcome.proto, contentType: 'application/x-protobuf' };
    if ('error' in outcome) return { body: { error: outcome.error, category: outcome.category } };
    return { body: outcome.json };
  });

  return {
    close() {
      closing.abort();
    },
    issuedJwts: () => [...(jwt?.issued ?? [])],
  };
}

/** An `asample` body as the engine's sample operation, from the sampler weights `checkpoint`. */
export function sampleInput(b: z.infer<typeof SampleBody>, checkpoint: CheckpointRef): OperationInput {
  const prompt = b.prompt.chunks.flatMap((c, i) => {
    if (!c.tokens) throw badRequest(`prompt.chunks[${i}]: only encoded_text chunks are supported by this model`);
    return c.tokens;
  });
  if (prompt.length === 0) throw badRequest('prompt has no tokens');
  const stop = b.sampling_params.stop;
  if (typeof stop === 'string' || (Array.isArray(stop) && stop.some((v) => typeof v === 'string')))
    throw badRequest('stop strings are not served by this emulator: pass stop token ids');
  const sp = b.sampling_params;
  return {
    kind: 'sample',
    prompts: [prompt],
    numSamples: b.num_samples,
    params: {
      maxTokens: sp.max_tokens ?? 256,
      temperature: sp.temperature,
      topK: sp.top_k > 0 ? sp.top_k : undefined,
      topP: sp.top_p,
      ...(typeof sp.seed === 'number' ? { seed: sp.seed } : {}),
      ...(Array.isArray(stop) && stop.length ? { stopTokenSequences: (stop as number[]).map((t) => [t]) } : {}),
    },
    promptLogprobs: b.prompt_logprobs,
    fromCheckpoint: checkpoint,
  };
}

/** A long poll: until the future settles, `holdMs` passes, or the server closes. */
export async function holdFor(future: Promise<unknown>, holdMs: number, closing: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let onClose: (() => void) | undefined;
  await Promise.race([
    future,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, holdMs);
      onClose = resolve;
      closing.addEventListener('abort', onClose, { once: true });
    }),
  ]);
  clearTimeout(timer);
  closing.removeEventListener('abort', onClose!); // a listener per held poll would pile up on the one signal
}

/** A failed operation as the future answers it: a bad input is the caller's error, anything else the service's. */
function failedOutcome(op: OperationRecord): Outcome {
  const code = op.error?.code ?? 'INTERNAL_ERROR';
  return { error: `${code}: ${op.error?.message ?? 'failed'}`, category: code === 'INVALID_INPUT' ? 'user' : 'server' };
}

/**
 * Tinker's datum → the engine's: `model_input` is the sequence without its last token and `target_tokens` the next
 * token of each position (the caller shifts); `weights` say which count. Losses are plain sums (`loss:sum`), so the
 * Baseten parser's `skip_token_normalization` reading is the one that applies.
 */
export function forwardInput(fb: ForwardBackwardRequest, r: ResourceRecord): OperationInput {
  const body = {
    data: fb.data.map((d) => ({
      model_input: { chunks: [{ type: 'encoded_text', tokens: d.tokens }] },
      loss_fn_inputs: Object.fromEntries(
        Object.entries(d.lossFnInputs).map(([k, t]) => [k, { data: t.data, dtype: t.dtype, shape: t.shape }]),
      ),
    })),
    loss_fn: fb.lossFn,
    loss_fn_config: { ...fb.lossFnConfig, skip_token_normalization: true },
  };
  return parseForward(body, r.model.vocabSize, fb.forwardOnly).input;
}

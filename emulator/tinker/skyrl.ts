import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { CheckpointRecord, Engine, OperationInput, OperationRecord, ResourceRecord } from '../engine';
import { ownerOf } from '../engine';
import { EmulatorHttpError } from '../errors';
import type { EmulatorRequest, JsonReply, Router } from '../http';
import { parseOptimStep } from '../together/requests';
import { decodeForwardBackwardRequest, encodeForwardBackwardOutput, encodeSampleResponse } from './proto';
import { SampleBody, forwardInput, holdFor, placeModel, sampleInput } from './routes';

/**
 * The Tinker API as SkyRL 0.4.0's server (`skyrl.tinker.api`) answers it, on the shared engine: the flavour
 * `tinkerFlavor: 'skyrl'` serves instead of hosted Tinker's (scripts/conformance/skyrl/FINDINGS.md is the record of
 * what SkyRL does; its source was read where the findings say so). Where it differs from hosted Tinker:
 * - ids are random (`session_<8hex>`, `model_<8hex>`, `sampling_<8hex>`), request ids one decimal counter; the key is
 *   never checked (any `X-API-Key`, or none; it only keeps test callers apart here);
 * - no session routes (`sessions/search`, `GET sessions/{id}`, `sessions/{id}/finish`: 404 `{"detail":"Not Found"}`);
 *   a session expires only once it has been heartbeated and then goes silent for `sessionTimeoutMs`, its models
 *   unloaded; a heartbeat to an expired session answers 200 and revives nothing;
 * - one served model: `base_model` is not checked (the served model trains whatever a create names);
 * - `create_model` is not deduplicated (a resend makes a second model); a failed create (rank over the maximum, no
 *   adapter slot) fails its future;
 * - operations run in arrival order; a `(model, seq_id)` resent with the same body is the same request, with
 *   another body a 409; saves carry no seq (a resend is a 409: the name is taken);
 * - `load_weights` needs a `model_id` (a session-addressed load is a 422) and is a model's first request only;
 * - forward results carry no metrics, only `logprobs` and `elementwise_loss` (−w·logprob for cross-entropy);
 * - a failed operation's future answers HTTP 400 `{"detail": <text>}` (a lost model: "Model <id> not loaded");
 *   errors are FastAPI's `{"detail": …}`, validation errors a list of `{type, loc, msg, input}` (422);
 * - checkpoint names match `^[a-zA-Z0-9_-]+$` (≤ 255); a named sampler save answers `tinker://<model>/<name>`;
 * - prompt logprobs have one entry per prompt token but the first (no leading NaN);
 * - `training_runs` lists every model, with `user_metadata` null and no session or status.
 */

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
const ID_MAX_LENGTH = 255;

type Outcome = { json: unknown } | { proto: Uint8Array } | { failed: string };

interface Future {
  owner: string;
  promise: Promise<Outcome>;
  outcome?: Outcome;
}

interface SkyrlSession {
  owner: string;
  status: 'active' | 'expired';
  /** Unset until the first heartbeat: such a session never expires. */
  lastHeartbeatAt?: number;
}

interface SkyrlModel {
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
class ValidationFailed extends Error {
  constructor(readonly detail: { type: string; loc: (string | number)[]; msg: string; input: unknown }[]) {
    super(detail.map((d) => d.msg).join('; '));
  }
}

const detail = (status: number, text: string) => new EmulatorHttpError(status, 'SKYRL', text);
const hex8 = () => randomBytes(4).toString('hex');

/** `tinker://<model>/<weights|sampler_weights>/<name>`, or (SkyRL's named sampler save) `tinker://<model>/<name>`. */
function parsePath(uri: string): { modelId: string; kind: '' | 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(?:(weights|sampler_weights)\/)?([^/]+)$/.exec(uri);
  return m ? { modelId: m[1]!, kind: (m[2] ?? '') as '' | 'weights' | 'sampler_weights', name: m[3]! } : undefined;
}

const CheckpointName = z.string().max(ID_MAX_LENGTH).regex(SKYRL_ID_PATTERN);
const CreateModelBody = z.object({
  session_id: z.string(),
  base_model: z.string(),
  lora_config: z.object({ rank: z.number().int(), seed: z.number().int().nullish() }).passthrough(),
});
const ModelRef = z.object({ model_id: z.string() });
const SeqOp = ModelRef.extend({ seq_id: z.number().int().nullish() });
const SaveWeightsBody = ModelRef.extend({ path: CheckpointName });
const SamplerWeightsBody = SeqOp.extend({ path: CheckpointName.nullish(), sampling_session_seq_id: z.number().int().nullish() });
const LoadWeightsBody = ModelRef.extend({ path: z.string(), optimizer: z.boolean().default(true), seq_id: z.number().int().nullish() });
const SessionRef = z.object({ session_id: z.string() });
const SamplingSessionBody = SessionRef.extend({ model_path: z.string().nullish(), base_model: z.string().nullish() });

/** A body checked as FastAPI checks it: what fails is answered 422 with `{type, loc, msg, input}` per problem. */
function validate<T>(schema: z.ZodType<T>, body: unknown): T {
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

/** The reply to a path SkyRL has no route for (FastAPI's). */
export function skyrlNoRoute(method: 'not-found' | 'method-not-allowed'): JsonReply {
  return method === 'not-found' ? { status: 404, body: { detail: 'Not Found' } } : { status: 405, body: { detail: 'Method Not Allowed' } };
}

/**
 * Per-token losses as SkyRL reports them (`elementwise_loss`): already weighted, so their sum is the loss. Cross-entropy
 * −w·logprob; importance sampling −w·r·A; PPO −w·min(r·A, clip(r)·A), with r = exp(logprob − sampler logprob).
 */
export function elementwiseLoss(input: Extract<OperationInput, { kind: 'forward-backward' }>, logprobs: number[][]): number[][] {
  const loss = input.loss;
  if (loss.type === 'cross_entropy') return logprobs.map((row, i) => row.map((lp, k) => -(loss.weights[i]?.[k] ?? 0) * lp));
  if (loss.type !== 'policy_gradient') return logprobs.map((row) => row.map(() => 0));
  const c = loss.config;
  return logprobs.map((row, i) =>
    row.map((lp, k) => {
      const w = c.weights[i]?.[k] ?? 0;
      if (w === 0) return 0;
      const a = c.advantages[i]?.[k] ?? 0;
      const r = Math.exp(lp - (c.samplingLogprobs[i]?.[k] ?? lp));
      const term = c.objective === 'ppo' ? Math.min(r * a, Math.min(Math.max(r, c.clipLow), c.clipHigh) * a) : r * a;
      return -w * term;
    }),
  );
}

export function addSkyrlTinkerRoutes(router: Router, engine: Engine, options: SkyrlOptions = {}): { close(): void } {
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

  // ── bootstrap and sessions ──────────────────────────────────────────────────────────────────────────

  add('GET', '/healthz', () => ({ body: { status: 'ok' } }));
  add('POST', '/client/config', () => ({ body: { pjwt_auth_enabled: false } }));
  add('POST', '/telemetry', () => ({ body: { status: 'accepted' } }));
  add('GET', '/get_server_capabilities', () => ({ body: { supported_models: [{ model_name: served }] } }));

  add('POST', '/create_session', (_req, owner) => {
    const id = `session_${hex8()}`;
    sessions.set(id, { owner, status: 'active' });
    return { body: { type: 'create_session', info_message: null, warning_message: null, error_message: null, session_id: id } };
  });

  add('POST', '/session_heartbeat', (req, owner) => {
    const s = sessionOf(validate(SessionRef, req.body).session_id, owner);
    s.lastHeartbeatAt = Date.now(); // an expired session stays expired
    return { body: { type: 'session_heartbeat' } };
  });

  // ── models ──────────────────────────────────────────────────────────────────────────────────────────

  add('POST', '/create_model', (req, owner) => {
    const b = validate(CreateModelBody, req.body);
    sessionOf(b.session_id, owner);
    const id = `model_${hex8()}`;
    const rank = b.lora_config.rank;
    const seed = b.lora_config.seed ?? Math.floor(Math.random() * 2 ** 31);
    let placed: (value: void) => void = () => undefined;
    let unplaced: (err: Error) => void = () => undefined;
    const ready = new Promise<void>((resolve, reject) => ((placed = resolve), (unplaced = reject)));
    ready.catch(() => undefined);
    const m: SkyrlModel = {
      id,
      owner,
      sessionId: b.session_id,
      baseModel: b.base_model,
      rank,
      seed,
      status: 'created',
      requests: 0,
      createdAt: Date.now(),
      ready,
    };
    models.set(id, m);
    const requestId = future(owner, async () => {
      try {
        if (rank < 1 || rank > maxRank) throw new Error(`LoRA rank ${rank} must be between 1 and ${maxRank}`);
        try {
          await placeModel(engine, { id, owner, sessionId: b.session_id, baseModel: served, lora: { rank, seed } });
        } catch {
          throw new Error(`Maximum number of LoRA adapters (${maxAdapters}) reached`);
        }
      } catch (err) {
        m.status = 'unloaded';
        unplaced(err as Error);
        throw err;
      }
      placed();
      const lora = { rank, alpha: 32.0, seed, train_attn: true, train_mlp: true, train_unembed: false };
      return { json: { model_id: id, base_model: b.base_model, lora_config: lora } };
    });
    return { body: { model_id: id, base_model: b.base_model, lora_config: b.lora_config, status: 'created', request_id: requestId } };
  });

  add('POST', '/get_info', (req, owner) => {
    const m = modelOf(validate(ModelRef, req.body).model_id, owner);
    return {
      body: {
        model_id: m.id,
        status: m.status,
        model_data: { base_model: m.baseModel, lora_config: { rank: m.rank, seed: null }, model_name: m.baseModel },
      },
    };
  });

  add('POST', '/unload_model', (req, owner) => {
    const m = modelOf(validate(ModelRef, req.body).model_id, owner);
    if (m.status !== 'unloaded') m.status = 'unloading';
    const requestId = future(owner, async () => {
      await m.ready.catch(() => undefined);
      unload(m);
      return { json: { model_id: m.id, status: 'unloaded', type: 'unload_model' } };
    });
    return { body: { request_id: requestId, model_id: m.id } };
  });

  // ── training ────────────────────────────────────────────────────────────────────────────────────────

  add('POST', '/forward_backward', (req, owner) => {
    if (
      String(req.headers['content-type'] ?? '')
        .split(';')[0]!
        .trim()
        .toLowerCase() !== 'application/x-protobuf'
    )
      throw detail(415, 'forward_backward requires a application/x-protobuf body (tinker SDK >= 0.25.0)');
    const fb = decodeForwardBackwardRequest(req.bytes);
    const m = modelOf(fb.modelId, owner);
    let input: Extract<OperationInput, { kind: 'forward-backward' }> | undefined;
    const fingerprint = `forward_backward\n${createHash('sha256').update(req.bytes).digest('hex')}`;
    const requestId = submit(
      owner,
      m,
      fb.seqId,
      fingerprint,
      () => {
        const parsed = forwardInput(fb, engine.findResource(m.id) as ResourceRecord);
        input = parsed.kind === 'forward-backward' ? parsed : undefined;
        return parsed;
      },
      (op) => {
        const o = op.output;
        if (o?.kind !== 'forward-backward' || !input) return { failed: 'no forward result' };
        const losses = elementwiseLoss(input, o.logprobs);
        const outputs = o.logprobs.map((lp, i) => ({ logprobs: lp, elementwise_loss: losses[i]! }));
        return { proto: encodeForwardBackwardOutput({ outputs, metrics: {}, outputType: 'scalar' }) };
      },
    );
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  add('POST', '/optim_step', (req, owner) => {
    const b = validate(SeqOp, req.body);
    const m = modelOf(b.model_id, owner);
    const lr = (req.body as { adam_params?: { learning_rate?: number } }).adam_params?.learning_rate ?? 0;
    const requestId = submit(
      owner,
      m,
      b.seq_id ?? undefined,
      `optim_step\n${req.rawBody}`,
      () => parseOptimStep(req.body),
      (op) => {
        const o = op.output;
        const gradNorm = o?.kind === 'optim-step' ? o.gradNorm : 0;
        return { json: { metrics: { 'skyrl.ai/grad_norm': gradNorm, 'skyrl.ai/learning_rate': lr } } };
      },
    );
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  add('POST', '/save_weights', (req, owner) => {
    const b = validate(SaveWeightsBody, req.body);
    const m = modelOf(b.model_id, owner, `Model '${b.model_id}' not found`);
    const release = reserveName(m, b.path, 'weights', owner);
    const requestId = submit(
      owner,
      m,
      undefined, // SkyRL's save carries no seq: a resend is a second save of a taken name
      `save_weights\n${req.rawBody}`,
      () => ({ kind: 'training-checkpoint', name: b.path }),
      () => ({ json: { path: `tinker://${m.id}/weights/${b.path}`, type: 'save_weights' } }),
    );
    void futures.get(requestId)!.promise.finally(release);
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  add('POST', '/save_weights_for_sampler', (req, owner) => {
    const b = validate(SamplerWeightsBody, req.body);
    const m = modelOf(b.model_id, owner);
    const ssq = b.sampling_session_seq_id ?? undefined;
    const seq = b.seq_id ?? undefined;
    if (!b.path && (ssq === undefined || seq === undefined))
      throw new ValidationFailed([
        {
          type: 'value_error',
          loc: ['body'],
          msg: "Value error, Either 'path' or both 'sampling_session_seq_id' and 'seq_id' must be provided",
          input: req.body,
        },
      ]);
    const name = b.path ?? `ss${ssq}_seq${seq}`;
    let samplingSessionId: string | null = null;
    if (ssq !== undefined && seq !== undefined) {
      samplingSessionId = `sampling_${hex8()}`;
      samplers.set(samplingSessionId, { owner, modelPath: `tinker://${m.id}/sampler_weights/${name}` });
    }
    const release = reserveName(m, name, 'sampler_weights', owner);
    const requestId = submit(
      owner,
      m,
      undefined,
      `save_weights_for_sampler\n${req.rawBody}`,
      () => ({ kind: 'inference-checkpoint', name }),
      () => ({
        json: {
          path: b.path ? `tinker://${m.id}/${b.path}` : null,
          type: 'save_weights_for_sampler',
          sampling_session_id: samplingSessionId,
        },
      }),
    );
    void futures.get(requestId)!.promise.finally(release);
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  /** A load is a model's first request only (SDK 0.25's create-then-load); the checkpoint's rank must be the model's. */
  add('POST', '/load_weights', (req, owner) => {
    const b = validate(LoadWeightsBody, req.body);
    const m = modelOf(b.model_id, owner);
    if (m.requests > 0) throw detail(400, `LoadWeights is not permitted with seq_id ${b.seq_id ?? m.requests + 1}`);
    const path = parsePath(b.path);
    if (!path || path.kind !== 'weights')
      throw detail(400, 'request.path must be in format tinker://source_model_id/weights/checkpoint_id');
    const c = checkpointOf(path.modelId, path.name, 'weights', owner);
    if (!c) throw detail(404, `Checkpoint not found: ${path.modelId}/${path.name}`);
    const requestId = submit(
      owner,
      m,
      undefined,
      `load_weights\n${req.rawBody}`,
      () => {
        if (c.loraRank !== m.rank)
          throw new Error(`Rank mismatch: checkpoint has rank ${c.loraRank}, model configured with rank ${m.rank}`);
        return { kind: 'load-checkpoint', checkpoint: { id: c.id }, optimizer: b.optimizer };
      },
      () => ({ json: { type: 'load_weights' } }),
    );
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  add('POST', '/weights_info', (req, owner) => {
    const b = validate(z.object({ tinker_path: z.string() }), req.body);
    const path = parsePath(b.tinker_path);
    if (!path || path.kind !== 'weights')
      throw detail(400, 'Invalid tinker path format. Expected: tinker://model_id/weights/checkpoint_id');
    const source = modelOf(path.modelId, owner);
    if (!checkpointOf(path.modelId, path.name, 'weights', owner)) throw detail(404, `Checkpoint not found: ${path.modelId}/${path.name}`);
    return { body: { base_model: source.baseModel, is_lora: true, lora_rank: source.rank } };
  });

  // ── sampling ────────────────────────────────────────────────────────────────────────────────────────

  add('POST', '/create_sampling_session', (req, owner) => {
    const b = validate(SamplingSessionBody, req.body);
    sessionOf(b.session_id, owner);
    if (!b.base_model === !b.model_path) throw detail(400, 'Exactly one of base_model or model_path must be provided');
    const id = `sampling_${hex8()}`;
    samplers.set(id, { owner, ...(b.model_path ? { modelPath: b.model_path } : { baseModel: b.base_model! }) });
    return { body: { type: 'create_sampling_session', sampling_session_id: id } };
  });

  add('GET', '/samplers/:id', (req, owner) => {
    const sampler = samplers.get(req.params.id!);
    if (!sampler || sampler.owner !== owner) throw detail(404, 'Sampler not found');
    const source = sampler.modelPath ? models.get(parsePath(sampler.modelPath)?.modelId ?? '') : undefined;
    return {
      body: {
        sampler_id: req.params.id,
        base_model: sampler.baseModel ?? source?.baseModel ?? served,
        model_path: sampler.modelPath ?? null,
      },
    };
  });

  add('POST', '/asample', (req, owner) => {
    const b = validate(SampleBody, req.body);
    if (b.sampling_session_id.includes(':')) throw detail(400, "sampling_session_id must not contain ':' (the routing-key delimiter)");
    const sampler = samplers.get(b.sampling_session_id);
    if (!sampler || sampler.owner !== owner) throw detail(404, 'Sampling session not found');
    if (!b.sampling_params.max_tokens) throw detail(400, 'max_tokens is currently required');
    if (b.topk_prompt_logprobs > 0) throw detail(400, 'topk_prompt_logprobs is not supported by the JAX backend');
    const path = sampler.modelPath ? parsePath(sampler.modelPath) : undefined;
    if (!path || path.kind === 'weights')
      throw detail(400, 'model_path must be tinker://model_id/checkpoint_id or tinker://model_id/sampler_weights/checkpoint_id');
    const m = modelOf(path.modelId, owner);
    const c: CheckpointRecord | undefined = checkpointOf(path.modelId, path.name, 'sampler_weights', owner);
    if (!c) throw detail(404, `Checkpoint not found: ${path.modelId}/${path.name}`);
    const input = sampleInput(b, { id: c.id });
    const requestId = future(owner, async () => {
      const op = engine.submitOperation(m.id, owner, `skyrl-sample-${lastRequestId}`, `asample\n${req.rawBody}`, () => input, {
        invalidAs: 'failed-operation',
      });
      await engine.settled(op, 3_600_000);
      if (op.status === 'FAILED') return failure(m, op);
      const result = op.output?.kind === 'sample' ? op.output.results[0] : undefined;
      if (!result) return { failed: 'no samples' };
      return {
        proto: encodeSampleResponse({
          sequences: result.sequences.map((q) => ({ tokens: q.tokens, logprobs: q.logprobs, stopReason: q.stopReason })),
          // One per prompt token but the first, and no NaN for it (the JAX backend's).
          ...(b.prompt_logprobs && result.promptLogprobs ? { promptLogprobs: result.promptLogprobs.slice(1) } : {}),
        }),
      };
    });
    return { body: { future_id: requestId, status: 'pending', request_id: requestId } };
  });

  // ── REST: runs and their checkpoints ────────────────────────────────────────────────────────────────

  const iso = (ms: number) => new Date(ms).toISOString();
  const runJson = (m: SkyrlModel) => ({
    training_run_id: m.id,
    base_model: m.baseModel,
    model_owner: 'default',
    is_lora: true,
    corrupted: false,
    lora_rank: m.rank,
    last_request_time: iso(m.createdAt),
    last_checkpoint: null,
    last_sampler_checkpoint: null,
    user_metadata: null,
  });

  add('GET', '/training_runs', (req, owner) => {
    const limit = Number(req.query.get('limit') ?? 20);
    const offset = Number(req.query.get('offset') ?? 0);
    const runs = [...models.values()].filter((m) => m.owner === owner);
    return {
      body: { training_runs: runs.slice(offset, offset + limit).map(runJson), cursor: { offset, limit, total_count: runs.length } },
    };
  });
  add('GET', '/training_runs/:run', (req, owner) => ({ body: runJson(modelOf(req.params.run!, owner)) }));

  const listCheckpoints = (req: EmulatorRequest, owner: string): JsonReply => {
    const run = req.params.run!;
    if (!SKYRL_ID_PATTERN.test(run) || run.length > ID_MAX_LENGTH)
      throw new ValidationFailed([
        {
          type: 'string_pattern_mismatch',
          loc: ['path', 'unique_id'],
          msg: `String should match pattern '${SKYRL_ID_PATTERN.source}'`,
          input: run,
        },
      ]);
    const checkpoints = engine
      .listCheckpoints({ owner })
      .filter((c) => c.resourceId === run)
      .sort((a, b) => a.createdAt - b.createdAt)
      .map((c) => {
        const kind = c.type === 'training' ? 'weights' : 'sampler_weights';
        return {
          checkpoint_id: c.name ?? c.id,
          checkpoint_type: c.type === 'training' ? 'training' : 'sampler',
          time: iso(c.createdAt),
          tinker_path: `tinker://${run}/${kind}/${c.name ?? c.id}`,
        };
      });
    return { body: { checkpoints } };
  };
  add('GET', '/training_runs/:run/checkpoints', listCheckpoints);
  add('GET', '/models/:run/checkpoints', listCheckpoints);

  const deleteCheckpoint = (run: string, kind: string | undefined, name: string, owner: string): JsonReply => {
    if (kind !== undefined && kind !== 'weights' && kind !== 'sampler_weights')
      throw detail(400, `Invalid checkpoint path: ${kind}/${name}`);
    if (!SKYRL_ID_PATTERN.test(name) || name.length > ID_MAX_LENGTH) throw detail(422, 'Invalid checkpoint_id');
    if (kind === undefined)
      throw detail(
        400,
        "Invalid checkpoint identifier. Expected format 'weights/<name>' (training weights) or 'sampler_weights/<name>' (sampler weights), where <name> is a single path segment.",
      );
    if (pendingNames.has(`${run}/${kind}/${name}`)) throw detail(425, 'Checkpoint is still being created');
    const c = checkpointOf(run, name, kind, owner);
    if (!c) throw detail(404, `Checkpoint not found: ${run}/${name}`);
    engine.deleteCheckpoint(c.id, owner);
    return { status: 204, body: undefined, bytes: new Uint8Array(), contentType: 'application/json' };
  };
  add('DELETE', '/training_runs/:run/checkpoints/:kind/:name', (req, owner) =>
    deleteCheckpoint(req.params.run!, req.params.kind, req.params.name!, owner),
  );
  add('DELETE', '/training_runs/:run/checkpoints/:name', (req, owner) =>
    deleteCheckpoint(req.params.run!, undefined, req.params.name!, owner),
  );

  // ── futures ─────────────────────────────────────────────────────────────────────────────────────────

  add('POST', '/retrieve_future', async (req, owner) => {
    const id = validate(z.object({ request_id: z.string() }), req.body).request_id;
    if (!/^\d+$/.test(id))
      return { status: 500, body: undefined, bytes: Buffer.from('Internal Server Error'), contentType: 'text/plain; charset=utf-8' };
    const f = futures.get(id);
    if (!f || f.owner !== owner) throw detail(404, 'Future not found');
    if (!f.outcome) await holdFor(f.promise, holdMs, closing.signal);
    const outcome = f.outcome;
    if (!outcome) throw detail(408, 'Timeout waiting for result');
    if ('proto' in outcome) return { body: undefined, bytes: outcome.proto, contentType: 'application/x-protobuf' };
    if ('failed' in outcome) throw detail(400, outcome.failed);
    return { body: outcome.json };
  });

  return {
    close() {
      closing.abort();
      if (timer) clearInterval(timer);
    },
  };
}

import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { EmulatorHttpError, badRequest, notFound } from '../errors';
import { EMULATED_MODELS, findModel } from '../models';
import type { Engine } from '../engine';
import type { Router } from '../http';
import { parseBody } from '../together/requests';
import { ModelRef, tinkerContext, type TinkerOptions } from './context';
import { addOperationRoutes } from './operation-routes';
import { addRestRoutes } from './rest-routes';

export type { TinkerOptions } from './context';

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

const CreateSessionBody = z
  .object({
    tags: z.array(z.string()).nullish(),
    user_metadata: z.record(z.string(), z.unknown()).nullish(),
    display_name: z.string().nullish(),
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

export function addTinkerRoutes(router: Router, engine: Engine, options: TinkerOptions = {}): { close(): void; issuedJwts(): string[] } {
  const ctx = tinkerContext(router, engine, options);
  const { jwt, closing, sessions, bySeq, add, session, model, future, createModel } = ctx;

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

  addOperationRoutes(ctx);
  addRestRoutes(ctx);

  return {
    close() {
      closing.abort();
    },
    issuedJwts: () => [...(jwt?.issued ?? [])],
  };
}

import { z } from 'zod';
import type { Engine } from '../engine';
import type { EmulatorRequest, JsonReply, Router } from '../http';
import { holdFor, placeModel } from './operations';
import {
  ID_MAX_LENGTH,
  ModelRef,
  SKYRL_ID_PATTERN,
  SessionRef,
  ValidationFailed,
  detail,
  hex8,
  skyrlContext,
  validate,
  type SkyrlModel,
  type SkyrlOptions,
} from './skyrl-context';
import { addSkyrlOperationRoutes } from './skyrl-operation-routes';

export type { SkyrlOptions } from './skyrl-context';
export { SKYRL_ID_PATTERN } from './skyrl-context';

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

const CreateModelBody = z.object({
  session_id: z.string(),
  base_model: z.string(),
  lora_config: z.object({ rank: z.number().int(), seed: z.number().int().nullish() }).passthrough(),
});

/** The reply to a path SkyRL has no route for (FastAPI's). */
export function skyrlNoRoute(method: 'not-found' | 'method-not-allowed'): JsonReply {
  return method === 'not-found' ? { status: 404, body: { detail: 'Not Found' } } : { status: 405, body: { detail: 'Method Not Allowed' } };
}

export function addSkyrlTinkerRoutes(router: Router, engine: Engine, options: SkyrlOptions = {}): { close(): void } {
  const ctx = skyrlContext(router, engine, options);
  const {
    holdMs,
    served,
    maxRank,
    maxAdapters,
    closing,
    timer,
    sessions,
    models,
    futures,
    pendingNames,
    add,
    sessionOf,
    modelOf,
    unload,
    future,
    checkpointOf,
  } = ctx;

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
  addSkyrlOperationRoutes(ctx);

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

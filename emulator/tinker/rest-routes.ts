import { z } from 'zod';
import type { CheckpointRecord, ResourceRecord } from '../engine';
import { badRequest, notFound } from '../errors';
import type { EmulatorRequest } from '../http';
import { parseBody } from '../together/requests';
import { type TinkerContext, type TinkerSession } from './context';
import { holdFor } from './operations';

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
const RetrieveBody = z.object({ request_id: z.string().min(1, 'request_id is required') }).passthrough();

/** REST (runs, their checkpoints, sessions, listed and read) and the futures' long poll. */
export function addRestRoutes(ctx: TinkerContext): void {
  const { engine, holdMs, closing, sessions, futures, samplers, add, session, expireIfLost, model } = ctx;

  // ── REST: runs, their checkpoints, sessions ─────────────────────────────────────────────────────────

  const iso = (ms: number) => new Date(ms).toISOString();
  const checkpointJson = (c: CheckpointRecord) => {
    const kind = c.type === 'training' ? 'weights' : 'sampler_weights';
    const name = c.name ?? c.id;
    return {
      checkpoint_id: `${kind}/${name}`,
      checkpoint_type: c.type === 'training' ? 'training' : 'sampler',
      time: iso(c.createdAt),
      tinker_path: `tinker://${c.resourceId}/${kind}/${name}`,
      public: false,
      expires_at: c.ttlSeconds !== undefined ? iso(c.createdAt + c.ttlSeconds * 1000) : null,
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
}

import type { z } from 'zod';
import type { CheckpointRecord, Engine, ResourceRecord } from '../engine';
import { EmulatorHttpError, badRequest, notFound } from '../errors';
import { errorReply, type EmulatorRequest, type Handler, type JsonReply, type Router } from '../http';
import { EMULATED_MODELS, findModel } from '../models';
import { CreateRunBody, CreateSamplerBody, ValidateCheckpointBody, checkpointRef, parseBody, parseCheckpointPath } from './requests';
import { LoopsState, isActive, loopsOwner, originOf, runExtra, type RunExtra, type SamplerExtra, type SamplerInfo } from './state';
import { checkpointFiles, checkpointJson, deploymentJson, iso, runJson, samplerJson, samplerStatus, userOf } from './views';

/**
 * Baseten Loops' control plane (`/v1/loops/*`, and the team-scoped create routes) on top of the engine: objects
 * wrapped in `{run}`, `{runs}`, `{sampler}`…, shown as views.ts makes them.
 */

/** Errors keep the shared `{"error": {"message", "code"}}` and add the `detail` string the SDK prints. */
export function loopsRoute(handler: Handler): Handler {
  return async (req) => {
    try {
      return await handler(req);
    } catch (err) {
      const reply = errorReply(err);
      return { ...reply, body: { ...(reply.body as object), detail: err instanceof Error ? err.message : String(err) } };
    }
  };
}

export interface FileSigner {
  sign(checkpointId: string, file: string): string;
}

export function addLoopsControlRoutes(router: Router, engine: Engine, state: LoopsState, signer: FileSigner): void {
  const add = (method: string, path: string, handler: (req: EmulatorRequest) => Promise<JsonReply> | JsonReply) =>
    router.add(method, path, loopsRoute(handler));
  const owned = (c: CheckpointRecord) => engine.findResource(c.resourceId)?.dialect === 'baseten' && c.name !== undefined;

  add('GET', '/v1/teams', (req) => ({ body: { teams: [{ id: 'team-emulator', name: 'default', owner: loopsOwner(req) }] } }));

  add('GET', '/v1/loops/capabilities', (req) => {
    loopsOwner(req);
    return {
      body: {
        supported_models: EMULATED_MODELS.map((m) => ({
          model_name: m.name,
          max_context_length: m.contextLength,
          supports_vision_language: false,
          // Not in the schema: what a client needs to check its data before provisioning.
          max_seq_len: m.maxSeqLen,
          max_lora_rank: m.maxLoraRank,
          max_batch_size: m.maxBatchSize,
          vocab_size: m.vocabSize,
          tokenizer: m.tokenizer,
          gpu_count: m.gpuCount,
          gpu_type: m.gpuType,
        })),
      },
    };
  });

  const createSession = (req: EmulatorRequest): JsonReply => {
    const s = state.createSession(loopsOwner(req));
    return { body: { session: { id: s.id, created_at: iso(s.createdAt) } } };
  };

  const createRun =
    (withSampler: boolean) =>
    (req: EmulatorRequest): JsonReply => {
      const owner = loopsOwner(req);
      const b = parseBody(CreateRunBody, req.body, 'run create');
      state.session(b.session_id, owner);
      const model = findModel(b.base_model);
      if (!model) throw badRequest(`base_model '${b.base_model}' is not supported; see GET /v1/loops/capabilities`);
      const loraRank = b.lora_rank ?? Math.min(64, model.maxLoraRank);
      if (loraRank > model.maxLoraRank) throw badRequest(`lora_rank ${loraRank} is over ${model.name}'s maximum of ${model.maxLoraRank}`);
      if (b.max_seq_len && b.max_seq_len > model.maxSeqLen)
        throw badRequest(`max_seq_len ${b.max_seq_len} is over ${model.name}'s maximum of ${model.maxSeqLen}`);
      if (b.path) {
        const path = parseCheckpointPath(b.path);
        if (path?.target !== 'trainer' || !engine.findCheckpoint(checkpointRef(path), owner)) {
          throw badRequest(`path '${b.path}' is not a trainer checkpoint of yours (bt://loops:<run>/weights/<name>)`);
        }
      }
      const reusedFrom = b.reuse_from_run_id ? reusableRun(owner, b) : undefined;
      const id = state.newId();
      const now = Date.now();
      const extra: RunExtra = {
        kind: 'trainer',
        sessionId: b.session_id,
        name: b.name ?? model.name,
        deploymentId: state.newId(),
        loraRank,
        ...(b.seed !== undefined && b.seed !== null ? { seed: b.seed } : {}),
        maxSeqLen: b.max_seq_len ?? model.maxSeqLen,
        replicas: b.replicas,
        availabilityModel: b.availability_model,
        scaleDownDelaySeconds: b.scale_down_delay_seconds,
        ...(b.path ? { path: b.path } : {}),
        ...(reusedFrom ? { reusedFromRunId: reusedFrom.id } : {}),
        ...(withSampler
          ? {
              sampler: {
                id: state.newId(),
                modelId: state.newId(),
                deploymentId: state.newId(),
                createdAt: now,
                sessionId: b.session_id,
                runId: id,
              },
            }
          : {}),
      };
      // One trainer per session and base model: a newer run replaces the older one.
      for (const older of state.runs(owner)) {
        const x = runExtra(older);
        if (x.sessionId === b.session_id && older.model.name === model.name && isActive(older)) state.deactivate(older, id);
      }
      const r = engine.createResource({
        id,
        dialect: 'baseten',
        owner,
        baseModel: model.name,
        ownerTag: extra.name,
        numGeneratorReplicas: withSampler ? 1 : 0,
        inactiveTimeoutMs: b.scale_down_delay_seconds * 1000,
        extra: extra as unknown as Record<string, unknown>,
      });
      return { body: { run: runJson(req, r) } };
    };

  /**
   * The run a create may reuse (`reuse_from_run_id`), as baseten-loops 0.32.0 documents it: a run of the same base
   * model and team (another's, or another model's, is refused here: the service's answer is not documented); a run of
   * more than one replica starts new deployments, and a spot run reuses only a spot one (both: not reused).
   */
  const reusableRun = (owner: string, b: z.infer<typeof CreateRunBody>): ResourceRecord | undefined => {
    const prior = state.runs(owner).find((r) => r.id === b.reuse_from_run_id);
    if (!prior) throw badRequest(`reuse_from_run_id '${b.reuse_from_run_id}' is not a run of your team`);
    if (prior.model.name !== b.base_model)
      throw badRequest(
        `reuse_from_run_id '${prior.id}' is a run of ${prior.model.name}, not ${b.base_model}: a run reuses only one of the same base model`,
      );
    if (b.replicas > 1) return undefined;
    if (b.availability_model === 'spot' && runExtra(prior).availabilityModel !== 'spot') return undefined;
    return prior;
  };

  const createSampler = (req: EmulatorRequest): JsonReply => {
    const owner = loopsOwner(req);
    const b = parseBody(CreateSamplerBody, req.body, 'sampler create');
    state.session(b.session_id, owner);
    if (b.run_id) {
      const r = state.run(b.run_id, owner);
      if (!isActive(r)) throw badRequest(`run ${r.id} is inactive; a sampler pairs with an active run`);
      const x = runExtra(r);
      // Idempotent per run: the run's sampler, created on first request.
      x.sampler ??= {
        id: state.newId(),
        modelId: state.newId(),
        deploymentId: state.newId(),
        createdAt: Date.now(),
        sessionId: x.sessionId,
        runId: r.id,
      };
      r.numGeneratorReplicas = Math.max(1, b.num_replicas ?? 1);
      // An injected `duplicate-create`: the service also applied a resent create as a new one (creates take no
      // idempotency key): an extra sampler of the session, billed on its own, that deactivating the run leaves up.
      if (engine.faults.draw(['duplicate-create'], { method: req.method, path: req.path, dialect: 'baseten' }))
        standaloneSampler(owner, r.model.name, { sessionId: x.sessionId, duplicateOf: r.id }, b.num_replicas);
      engine.noteChange();
      return { body: { sampler: samplerJson(req, r, x.sampler) } };
    }
    if (Boolean(b.base_model) === Boolean(b.model_path))
      throw badRequest('a standalone sampler needs exactly one of base_model and model_path (or run_id for a paired one)');
    let baseModel = b.base_model ?? '';
    if (b.model_path) {
      const path = parseCheckpointPath(b.model_path);
      const checkpoint = path?.target === 'sampler' ? engine.findCheckpoint(checkpointRef(path), owner) : undefined;
      if (!checkpoint)
        throw badRequest(`model_path '${b.model_path}' is not a sampler checkpoint of yours (bt://loops:<run>/sampler_weights/<name>)`);
      baseModel = checkpoint.baseModel;
    }
    const { resource, sampler } = standaloneSampler(
      owner,
      baseModel,
      { sessionId: b.session_id, ...(b.model_path ? { modelPath: b.model_path } : {}) },
      b.num_replicas,
    );
    return { body: { sampler: samplerJson(req, resource, sampler) } };
  };

  /** A sampler that is its own resource (billed until deactivated itself): standalone, or a duplicate of a run's. */
  const standaloneSampler = (
    owner: string,
    baseModel: string,
    info: Pick<SamplerInfo, 'sessionId' | 'modelPath' | 'duplicateOf'>,
    replicas: number | null | undefined,
  ) => {
    const id = state.newId();
    const sampler: SamplerInfo = { id, modelId: state.newId(), deploymentId: state.newId(), createdAt: Date.now(), ...info };
    const extra: SamplerExtra = { kind: 'sampler', sampler };
    const resource = engine.createResource({
      id,
      dialect: 'baseten',
      owner,
      baseModel,
      numGeneratorReplicas: replicas ?? 1,
      extra: extra as unknown as Record<string, unknown>,
    });
    return { resource, sampler };
  };

  for (const root of ['/v1/loops', '/v1/teams/:team/loops']) {
    add('POST', `${root}/sessions`, createSession);
    add('POST', `${root}/trainers`, createRun(false));
    add('POST', `${root}/runs`, createRun(true));
    add('POST', `${root}/samplers`, createSampler);
  }

  add('GET', '/v1/loops/sessions/:id', (req) => {
    const owner = loopsOwner(req);
    const s = state.session(req.params.id!, owner);
    const runs = state.runs(owner).filter((r) => runExtra(r).sessionId === s.id);
    return { body: { session: { id: s.id, created_at: iso(s.createdAt), run_ids: runs.map((r) => r.id) } } };
  });

  add('GET', '/v1/loops/runs', (req) => {
    const owner = loopsOwner(req);
    const runId = req.query.get('run_id');
    const baseModel = req.query.get('base_model');
    const sessionId = req.query.get('session_id'); // an emulator extension; the service filters only by run and model
    const runs = state
      .runs(owner)
      .filter((r) => !runId || r.id === runId)
      .filter((r) => !baseModel || r.model.name === baseModel)
      .filter((r) => !sessionId || runExtra(r).sessionId === sessionId);
    return { body: paged(req, 'runs', runs, (r) => runJson(req, r)) };
  });

  add('GET', '/v1/loops/runs/:id', (req) => ({ body: { run: runJson(req, state.run(req.params.id!, loopsOwner(req))) } }));

  /** Deactivation is idempotent: an inactive run answers the same. It tears down the paired sampler too. */
  add('POST', '/v1/loops/runs/:id/deactivate', (req) => {
    const owner = loopsOwner(req);
    const r = state.run(req.params.id!, owner);
    state.deactivate(r);
    return { body: { id: r.id, base_model: r.model.name, user: userOf(owner) } };
  });

  add('GET', '/v1/loops/samplers', (req) => ({
    body: paged(req, 'samplers', state.samplers(loopsOwner(req)), (s) => samplerJson(req, s.resource, s.sampler)),
  }));

  add('GET', '/v1/loops/samplers/:id', (req) => {
    const s = state.sampler(req.params.id!, loopsOwner(req));
    return { body: { sampler: samplerJson(req, s.resource, s.sampler) } };
  });

  add('POST', '/v1/loops/samplers/:id/deactivate', (req) => {
    const owner = loopsOwner(req);
    const s = state.sampler(req.params.id!, owner);
    if (s.resource.extra.kind === 'trainer')
      throw new EmulatorHttpError(409, 'CONFLICT', `sampler ${s.sampler.id} is paired to run ${s.sampler.runId}; deactivate the run`);
    state.deactivate(s.resource);
    return { body: { id: s.sampler.id, base_model: s.resource.model.name, user: userOf(owner) } };
  });

  add('GET', '/v1/loops/deployments', (req) => ({
    body: paged(req, 'deployments', state.runs(loopsOwner(req)), (r) => deploymentJson(req, r)),
  }));

  /**
   * A listing, paged: the service documents no paging for these lists, so by default all fit one page; with the
   * fault config's `listPageSize` they answer that many at a time with `next_page_token` (an offset, as the
   * checkpoint files listing does), taken back as `page_token`, so clients that must follow pages are exercised.
   */
  function paged<T>(req: EmulatorRequest, key: string, items: T[], json: (item: T) => unknown): Record<string, unknown> {
    const size = engine.faults.listPageSize;
    const from = Number(req.query.get('page_token') ?? 0);
    if (!Number.isInteger(from) || from < 0)
      throw badRequest(`page_token must be an integer offset ≥ 0, got '${req.query.get('page_token')}'`);
    if (size === undefined) return { [key]: items.slice(from).map(json) };
    const page = items.slice(from, from + size);
    return { [key]: page.map(json), next_page_token: from + size < items.length ? from + size : null };
  }

  add('GET', '/v1/loops/deployments/:id', (req) => ({
    body: { deployment: deploymentJson(req, state.runByDeployment(req.params.id!, loopsOwner(req))) },
  }));

  add('POST', '/v1/loops/deployments/:id/deactivate', (req) => {
    const owner = loopsOwner(req);
    const r = state.runByDeployment(req.params.id!, owner);
    state.deactivate(r);
    return { body: { id: runExtra(r).deploymentId, base_model: r.model.name, user: userOf(owner) } };
  });

  /** A sampler's readiness, on the generic models API: the top-level `status` string. */
  add('GET', '/v1/models/:model/deployments/:deployment', (req) => {
    const found = state
      .samplers(loopsOwner(req))
      .find((s) => s.sampler.modelId === req.params.model && s.sampler.deploymentId === req.params.deployment);
    if (!found) throw notFound('model deployment', `${req.params.model}/${req.params.deployment}`);
    return {
      body: {
        id: found.sampler.deploymentId,
        model_id: found.sampler.modelId,
        name: found.sampler.id,
        status: samplerStatus(found.resource),
      },
    };
  });

  add('GET', '/v1/loops/checkpoints', (req) => {
    const owner = loopsOwner(req);
    const filters = ['run_id', 'base_model', 'checkpoint_path'].filter((k) => req.query.get(k));
    if (filters.length !== 1) throw badRequest('give exactly one of run_id, base_model and checkpoint_path');
    const all = engine.listCheckpoints({ owner }).filter(owned).reverse(); // oldest first
    const runId = req.query.get('run_id');
    const baseModel = req.query.get('base_model');
    const uri = req.query.get('checkpoint_path');
    let found: CheckpointRecord[];
    if (uri) {
      const path = parseCheckpointPath(uri);
      const c = path && engine.findCheckpoint(checkpointRef(path), owner);
      if (!c) throw notFound('checkpoint', uri);
      found = [c];
    } else {
      found = all.filter((c) => (runId ? c.resourceId === runId : c.baseModel === baseModel));
    }
    return { body: { checkpoints: found.map(checkpointJson) } };
  });

  add('POST', '/v1/loops/checkpoints/validate', (req) => {
    const owner = loopsOwner(req);
    const b = parseBody(ValidateCheckpointBody, req.body, 'checkpoint validate');
    const path = parseCheckpointPath(b.checkpoint_path);
    if (path?.target !== 'sampler' || !engine.findCheckpoint(checkpointRef(path), owner)) {
      throw badRequest(
        `checkpoint_path '${b.checkpoint_path}' is not an accessible sampler checkpoint (bt://loops:<run>/sampler_weights/<name>)`,
      );
    }
    return { body: {} };
  });

  const checkpointOf = (req: EmulatorRequest): CheckpointRecord => {
    const c = engine.getCheckpoint(req.params.id!, loopsOwner(req));
    if (!owned(c)) throw notFound('checkpoint', c.id);
    return c;
  };

  /** Files with presigned (signed, unauthenticated) loopback URLs, paged by an integer offset. */
  add('GET', '/v1/loops/checkpoints/:id/files', (req) => {
    const c = checkpointOf(req);
    const pageSize = Number(req.query.get('page_size') ?? 1000);
    const pageToken = Number(req.query.get('page_token') ?? 0);
    if (!Number.isInteger(pageSize) || pageSize < 1)
      throw badRequest(`page_size must be a positive integer, got '${req.query.get('page_size')}'`);
    if (!Number.isInteger(pageToken) || pageToken < 0)
      throw badRequest(`page_token must be an integer offset ≥ 0, got '${req.query.get('page_token')}'`);
    const files = checkpointFiles(c);
    const page = files.slice(pageToken, pageToken + pageSize);
    return {
      body: {
        presigned_urls: page.map((f) => ({
          url: `${originOf(req)}/baseten/files/${c.id}/${f.name}?signature=${signer.sign(c.id, f.name)}`,
          relative_file_name: f.name,
          node_rank: 0,
          size_bytes: Buffer.byteLength(JSON.stringify(f.content)),
          last_modified: iso(c.createdAt),
        })),
        next_page_token: pageToken + pageSize < files.length ? pageToken + pageSize : null,
        total_count: files.length,
      },
    };
  });

  add('GET', '/v1/loops/checkpoints/:id/source', (req) => {
    checkpointOf(req);
    return { body: { source: { kind: 's3' } } };
  });

  add('GET', '/baseten/files/:id/:file', (req) => {
    const c = engine.findCheckpoint({ id: req.params.id! });
    const file = c && checkpointFiles(c).find((f) => f.name === req.params.file);
    if (!c || !file || req.query.get('signature') !== signer.sign(c.id, file.name))
      throw notFound('file', `${req.params.id}/${req.params.file}`);
    return { body: file.content };
  });
}

import type {
  Engine,
  CheckpointRecord,
  OperationInput,
  OperationKind,
  OperationRecord,
  ResourceRecord,
  ResourceStatus,
  SessionRecord,
  SessionStatus,
} from '../engine';
import { EmulatorHttpError, badRequest } from '../errors';
import type { EmulatorRequest, Router } from '../http';
import { EMULATED_MODELS, findModel, type EmulatedModel } from '../models';
import { bundledTokenizer } from '../tokenizer';
import {
  ExtendExpiryBody,
  ResourceCreateBody,
  SessionCreateBody,
  SessionPatchBody,
  WeightsSyncBody,
  parseBody,
  parseCustomForwardBackward,
  parseForwardBackward,
  parseOptimStep,
  parseSample,
} from './requests';

/**
 * Together AI post-training (`/v1/rl/*`) on top of the engine. Shapes follow the official `together` SDK
 * (providers/together/WIRE.md): protobuf-style enum names, int64 values as strings, RFC 3339 times, cursor
 * pagination with `meta.next_cursor`. Errors are `{"error": {"message", "code"}}`.
 */

const iso = (ms: number) => new Date(ms).toISOString();
const i64 = (n: number) => String(n);

/** `trainer_config.<lora|full>.max_batch_size` of the supported-models listing: the sequences one forward-backward takes. */
function maxBatchSizeOf(m: EmulatedModel, loraEnabled: boolean): number {
  return loraEnabled ? m.maxBatchSize : Math.max(1, m.maxBatchSize / 4);
}

/**
 * "Maximum global batch size accepted by a forward-backward step" (the SDK's `max_batch_size`). How the service
 * refuses a larger one is not documented: the emulator answers 400 INVALID_INPUT naming the limit.
 */
function withinBatchLimit(op: OperationInput, resource: ResourceRecord): OperationInput {
  const limit = maxBatchSizeOf(resource.model, resource.loraEnabled);
  if ('sequences' in op && op.sequences.length > limit) {
    const config = resource.loraEnabled ? 'lora' : 'full';
    throw badRequest(
      `samples has ${op.sequences.length} sequences; ${resource.model.name} accepts at most ${limit} per forward-backward step (trainer_config.${config}.max_batch_size)`,
      'INVALID_INPUT',
    );
  }
  return op;
}

const OPERATION_KINDS: readonly OperationKind[] = [
  'forward-backward',
  'custom-forward-backward',
  'optim-step',
  'weights-sync',
  'sample',
  'training-checkpoint',
  'inference-checkpoint',
];

/** Together has no preempted state: a reclaimed GPU reads as any other resource failure. */
function resourceErrorCode(code: string): string {
  return `MODEL_RESOURCES_ERROR_CODE_${code === 'PREEMPTED' ? 'RESOURCE_UNAVAILABLE' : code}`;
}

function resourceJson(engine: Engine, r: ResourceRecord): Record<string, unknown> {
  const expires = engine.expiresAt(r);
  const queuePosition = engine.queuePosition(r);
  return {
    id: r.id,
    base_model: r.model.name,
    created_at: iso(r.createdAt),
    created_by: r.owner,
    updated_at: iso(r.updatedAt),
    compute_config: { num_generator_replicas: r.numGeneratorReplicas, gpu_type: r.model.gpuType },
    inactive_timeout: Math.round(r.inactiveTimeoutMs / 1000),
    lora_enabled: r.loraEnabled,
    optimizer_config: r.extra.optimizer_config ?? { adam: {} },
    status: `MODEL_RESOURCES_STATUS_${r.status}`,
    // Set while the create waits in the capacity queue; 0 once it waits only for its pods.
    status_details: r.status === 'PENDING' ? { queue_position: queuePosition ?? 0 } : {},
    ...(r.extra.base_weights_ref ? { base_weights_ref: r.extra.base_weights_ref } : {}),
    ...(expires !== undefined ? { expires_at: iso(expires) } : {}),
    ...(r.error
      ? { error: { code: resourceErrorCode(r.error.code), message: r.error.message, occurred_at: iso(r.error.occurredAt) } }
      : {}),
  };
}

function trainingCheckpointJson(c: CheckpointRecord): Record<string, unknown> {
  return { id: c.id, created_at: iso(c.createdAt), step: i64(c.step), registration: { id: `ml_${c.id}`, revision_id: `rv_${c.id}` } };
}

function inferenceCheckpointJson(c: CheckpointRecord): Record<string, unknown> {
  return {
    id: c.id,
    created_at: iso(c.createdAt),
    step: i64(c.step),
    registration: { adapter: { id: `ml_${c.id}`, revision_id: `rv_${c.id}` } },
  };
}

function sessionJson(engine: Engine, s: SessionRecord): Record<string, unknown> {
  const r = engine.resourceOf(s);
  const step = engine.sessionStep(s);
  const checkpoints = engine.sessionCheckpoints(s);
  return {
    id: s.id,
    base_model: r.model.name,
    model_resources_id: s.resourceId,
    created_at: iso(s.createdAt),
    created_by: s.owner,
    updated_at: iso(s.updatedAt),
    status: `TRAINING_SESSION_STATUS_${s.status}`,
    step: i64(step),
    policy_state: {
      applied_weights_version: i64(s.weightsVersion),
      pending_publish: false,
      target_weights_version: i64(s.weightsVersion),
      trainer_step: i64(step),
    },
    training_checkpoints: checkpoints.filter((c) => c.type === 'training').map(trainingCheckpointJson),
    inference_checkpoints: checkpoints.filter((c) => c.type === 'inference').map(inferenceCheckpointJson),
    metadata: s.metadata,
    lora_config: {
      rank: s.lora.rank,
      ...(s.lora.alpha !== undefined ? { alpha: s.lora.alpha } : {}),
      ...(s.lora.seed !== undefined ? { seed: i64(s.lora.seed) } : {}),
      train_unembed: s.lora.trainUnembed ?? true,
    },
    ...(s.displayName ? { display_name: s.displayName } : {}),
    ...(s.resumeFromCheckpointId ? { resume_from_checkpoint_id: s.resumeFromCheckpointId } : {}),
    ...(s.error
      ? { error: { code: `TRAINING_SESSION_ERROR_CODE_${s.error.code}`, message: s.error.message, occurred_at: iso(s.error.occurredAt) } }
      : {}),
  };
}

function checkpointJson(c: CheckpointRecord): Record<string, unknown> {
  return {
    id: c.id,
    base_model: c.baseModel,
    created_at: iso(c.createdAt),
    session_id: c.sessionId,
    step: i64(c.step),
    type: c.type === 'training' ? 'CHECKPOINT_TYPE_TRAINING' : 'CHECKPOINT_TYPE_INFERENCE',
    lora_rank: c.loraRank,
    ...(c.type === 'training'
      ? { training_registration: { id: `ml_${c.id}`, revision_id: `rv_${c.id}` } }
      : { inference_registration: { adapter: { id: `ml_${c.id}`, revision_id: `rv_${c.id}` } } }),
  };
}

function tensor(values: number[]): Record<string, unknown> {
  return { data: values, dtype: 'float32', shape: [values.length] };
}

function operationJson(engine: Engine, op: OperationRecord): Record<string, unknown> {
  const out: Record<string, unknown> = { id: op.id, status: `TRAINING_OPERATION_STATUS_${op.status}` };
  if (op.status === 'FAILED' && op.error) out.error = { code: `TRAINING_OPERATION_ERROR_CODE_${op.error.code}`, message: op.error.message };
  const o = op.output;
  if (op.status !== 'COMPLETED' || !o) return out;
  switch (o.kind) {
    case 'forward-backward':
      out.output = {
        loss: o.loss,
        // `name:reduction` keys, as Tinker's: a GRPO loss under its aggregation is a mean and is not labelled a sum.
        metrics: { [o.reduction === 'mean' ? 'loss:mean' : 'loss:sum']: o.loss, 'num_tokens:sum': o.tokens },
        ...(o.returnOutputs
          ? {
              loss_fn_outputs: o.logprobs.map((lp, i) => ({ tensors: { logprobs: tensor(lp.map((v, j) => (o.counted[i]![j] ? v : 0))) } })),
            }
          : {}),
      };
      break;
    case 'custom-forward-backward':
      out.output = {};
      break;
    case 'optim-step':
      out.output = { step: i64(o.step), metrics: { grad_norm: o.gradNorm } };
      break;
    case 'weights-sync':
      out.output = { weights_version: i64(o.weightsVersion) };
      break;
    case 'sample':
      out.output = {
        results: o.results.map((r) => ({
          sequences: r.sequences.map((seq) => ({
            tokens: seq.tokens.map(i64),
            logprobs: seq.logprobs,
            stop_reason: seq.stopReason === 'stop' ? 'STOP_REASON_STOP' : 'STOP_REASON_LENGTH',
            prompt_cache_hit_tokens: 0,
          })),
          policy_segments: [{ start_token: 0, version: r.policyVersion }],
          ...(r.promptLogprobs ? { prompt_logprobs: r.promptLogprobs } : {}),
        })),
      };
      break;
    case 'training-checkpoint':
      out.output = { checkpoint: trainingCheckpointJson(engine.getCheckpoint(o.checkpointId)) };
      break;
    case 'inference-checkpoint':
      out.output = { checkpoint: inferenceCheckpointJson(engine.getCheckpoint(o.checkpointId)) };
      break;
  }
  return out;
}

/** `Authorization: Bearer <key>` is required; the owner (`created_by`) is derived from the key. */
export type OwnerOf = (req: EmulatorRequest) => string;

function listQuery(req: EmulatorRequest): { after?: string; limit: number } {
  const limitText = req.query.get('limit');
  const limit = limitText === null ? 20 : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw badRequest(`limit must be an integer from 1 to 100, got '${limitText}'`);
  return { after: req.query.get('after') ?? undefined, limit };
}

function statuses<T extends string>(req: EmulatorRequest, prefix: string, allowed: readonly T[]): T[] {
  const raw = [...req.query.getAll('status'), ...req.query.getAll('status[]')].flatMap((v) => v.split(',')).filter(Boolean);
  return raw.map((v) => {
    const bare = v.startsWith(prefix) ? v.slice(prefix.length) : v;
    if (!allowed.includes(bare as T)) throw badRequest(`unknown status filter '${v}'`);
    return bare as T;
  });
}

function page<T extends { id: string }>(items: T[], after: string | undefined, limit: number, render: (t: T) => unknown) {
  let start = 0;
  if (after) {
    const idx = items.findIndex((i) => i.id === after);
    if (idx < 0) throw badRequest(`cursor '${after}' does not match any item`);
    start = idx + 1;
  }
  const slice = items.slice(start, start + limit);
  const hasMore = start + limit < items.length;
  return { data: slice.map(render), meta: { has_more: hasMore, limit, next_cursor: hasMore ? slice[slice.length - 1]!.id : '' } };
}

function createdByFilter(req: EmulatorRequest, owner: string): string | undefined {
  const createdBy = req.query.get('created_by');
  if (createdBy === null || createdBy === '') return undefined;
  return createdBy === 'me' ? owner : createdBy;
}

const RESOURCE_STATUSES: readonly ResourceStatus[] = ['PENDING', 'CREATING', 'READY', 'STOPPING', 'STOPPED', 'ERROR'];
const SESSION_STATUSES: readonly SessionStatus[] = ['CREATING', 'RUNNING', 'STOPPING', 'STOPPED', 'ERROR', 'EXPIRED'];

function operationKind(text: string): OperationKind {
  if (!OPERATION_KINDS.includes(text as OperationKind)) throw new EmulatorHttpError(404, 'NOT_FOUND', `unknown operation kind '${text}'`);
  return text as OperationKind;
}

export function addTogetherRoutes(router: Router, engine: Engine, ownerOf: OwnerOf): void {
  const P = '/v1/rl';

  router.add('GET', `${P}/supported-models`, () => ({
    body: {
      data: EMULATED_MODELS.map((m) => ({
        base_model: m.name,
        default_gpu_type: m.gpuType,
        compute_configs: [
          {
            gpu_type: m.gpuType,
            generator_config: {
              context_length: m.contextLength,
              sampling_defaults: { logprobs: 0, max_tokens: 256, n: 1, temperature: 1 },
            },
            trainer_config: {
              lora: { max_batch_size: maxBatchSizeOf(m, true), max_rank: m.maxLoraRank, max_seq_length: m.maxSeqLen },
              full: { max_batch_size: maxBatchSizeOf(m, false), max_seq_length: m.maxSeqLen },
            },
          },
        ],
        // Not in Together's schema (extra fields are kept by the SDK): lets clients pick the right tokenizer.
        vocab_size: m.vocabSize,
        tokenizer: m.tokenizer,
        gpu_count: m.gpuCount,
        // Stands in for the catalog's "adapter capacity" column: concurrent sessions on a LoRA resource (SDK 3.1.1's
        // RlSupportedModel has no such field; a full-weight resource accepts one).
        adapter_capacity: engine.loraSessionCap(m),
        // Not in the SDK's RlSupportedModel either: the emulator's stand-in for the stop-string column of Together's
        // supported-models catalog table (docs.together.ai/docs/post-training/supported-models).
        supports_stop_strings: m.stopStrings,
      })),
    },
  }));

  router.add('POST', `${P}/model-resources/estimate-cost`, (req) => {
    ownerOf(req);
    const b = parseBody(ResourceCreateBody, req.body, 'estimate-cost');
    const m = findModel(b.base_model);
    if (!m) throw badRequest(`base_model '${b.base_model}' is not supported`);
    return { body: { currency: 'USD', price_per_hour: engine.resourcePricePerHour(m) } };
  });

  router.add('POST', `${P}/model-resources`, (req) => {
    const owner = ownerOf(req);
    const b = parseBody(ResourceCreateBody, req.body, 'model-resources create');
    const r = engine.createResource({
      dialect: 'together',
      owner,
      baseModel: b.base_model,
      numGeneratorReplicas: b.compute_config?.num_generator_replicas ?? 1,
      loraEnabled: b.lora_enabled ?? true,
      inactiveTimeoutMs: b.inactive_timeout !== undefined ? b.inactive_timeout * 1000 : undefined,
      extra: { optimizer_config: b.optimizer_config, base_weights_ref: b.base_weights_ref },
    });
    return { body: resourceJson(engine, r) };
  });

  router.add('GET', `${P}/model-resources`, (req) => {
    const owner = ownerOf(req);
    const { after, limit } = listQuery(req);
    const items = engine.listResources({
      owner: createdByFilter(req, owner) ?? owner,
      statuses: statuses(req, 'MODEL_RESOURCES_STATUS_', RESOURCE_STATUSES),
      dialect: 'together',
    });
    return { body: page(items, after, limit, (r) => resourceJson(engine, r)) };
  });

  router.add('GET', `${P}/model-resources/:id`, (req) => ({
    body: resourceJson(engine, engine.getResource(req.params.id!, ownerOf(req))),
  }));

  router.add('POST', `${P}/model-resources/:id/stop`, (req) => {
    const force = req.query.get('force');
    if (force !== null && force !== 'true' && force !== 'false') throw badRequest(`force must be true or false, got '${force}'`);
    return { body: resourceJson(engine, engine.stopResource(req.params.id!, ownerOf(req), force === 'true')) };
  });

  router.add('POST', `${P}/model-resources/:id/extend-expiry`, (req) => {
    const b = parseBody(ExtendExpiryBody, req.body, 'extend-expiry');
    return { body: resourceJson(engine, engine.extendExpiry(req.params.id!, ownerOf(req), b.seconds)) };
  });

  router.add('POST', `${P}/training-sessions`, async (req) => {
    const owner = ownerOf(req);
    const b = parseBody(SessionCreateBody, req.body, 'training-sessions create');
    const s = await engine.createSession({
      resourceId: b.model_resources_id,
      owner,
      lora: b.lora_config && {
        rank: b.lora_config.rank,
        alpha: b.lora_config.alpha,
        seed: b.lora_config.seed,
        trainUnembed: b.lora_config.train_unembed,
      },
      resumeFromCheckpointId: b.resume_from_checkpoint_id,
      loadOptimizer: b.load_optimizer,
      displayName: b.display_name,
      metadata: b.metadata,
    });
    return { body: sessionJson(engine, s) };
  });

  router.add('GET', `${P}/training-sessions`, (req) => {
    const owner = ownerOf(req);
    const { after, limit } = listQuery(req);
    const items = engine.listSessions({
      owner: createdByFilter(req, owner) ?? owner,
      resourceId: req.query.get('model_resources_id') ?? undefined,
      statuses: statuses(req, 'TRAINING_SESSION_STATUS_', SESSION_STATUSES),
    });
    return { body: page(items, after, limit, (s) => sessionJson(engine, s)) };
  });

  router.add('GET', `${P}/training-sessions/:sid`, (req) => ({
    body: sessionJson(engine, engine.getSession(req.params.sid!, ownerOf(req))),
  }));

  router.add('PATCH', `${P}/training-sessions/:sid`, (req) => {
    const b = parseBody(SessionPatchBody, req.body, 'training-sessions update');
    return {
      body: sessionJson(engine, engine.updateSession(req.params.sid!, ownerOf(req), { displayName: b.display_name, metadata: b.metadata })),
    };
  });

  router.add('POST', `${P}/training-sessions/:sid/stop`, (req) => ({
    body: sessionJson(engine, engine.stopSession(req.params.sid!, ownerOf(req))),
  }));

  router.add('POST', `${P}/training-sessions/:sid/operations/:kind`, async (req) => {
    const owner = ownerOf(req);
    const kind = operationKind(req.params.kind!);
    const session = engine.getSession(req.params.sid!, owner);
    const resource = engine.resourceOf(session);
    const model = resource.model;
    const key = headerValue(req.headers['idempotency-key']);
    const op = engine.submitOperation(session.id, owner, key, req.rawBody, () => {
      switch (kind) {
        case 'forward-backward':
          return withinBatchLimit(parseForwardBackward(req.body, model.vocabSize), resource);
        case 'custom-forward-backward':
          return withinBatchLimit(parseCustomForwardBackward(req.body, model.vocabSize), resource);
        case 'optim-step':
          return parseOptimStep(req.body);
        case 'weights-sync':
          parseBody(WeightsSyncBody, req.body, 'weights-sync');
          return { kind: 'weights-sync' };
        case 'sample':
          // The SDK raises before sending ("does not have generator capability"); what the service answers is not
          // documented, so the emulator refuses as invalid input, naming the setting.
          if (resource.numGeneratorReplicas === 0) {
            throw badRequest(
              'this model resource has no generator: it was created with num_generator_replicas 0 (trainer only)',
              'INVALID_INPUT',
            );
          }
          return parseSample(req.body, model.vocabSize, stopEncoder(model.name), {
            stopStrings: model.stopStrings !== false, // a resource restored from an older snapshot has no flag: as before
            generatorReplicas: resource.numGeneratorReplicas,
          });
        case 'training-checkpoint':
          return { kind: 'training-checkpoint' };
        case 'inference-checkpoint':
          return { kind: 'inference-checkpoint' };
      }
    });
    return { body: operationJson(engine, op) };
  });

  router.add('GET', `${P}/training-sessions/:sid/operations/:kind/:opid`, (req) => {
    const op = engine.getOperation(req.params.sid!, ownerOf(req), req.params.opid!, operationKind(req.params.kind!));
    return { body: operationJson(engine, op) };
  });

  router.add('GET', `${P}/checkpoints`, (req) => {
    const owner = ownerOf(req);
    const { after, limit } = listQuery(req);
    const typeText = req.query.get('type');
    let type: 'training' | 'inference' | undefined;
    if (typeText === 'CHECKPOINT_TYPE_TRAINING') type = 'training';
    else if (typeText === 'CHECKPOINT_TYPE_INFERENCE') type = 'inference';
    else if (typeText !== null) throw badRequest(`unknown checkpoint type '${typeText}'`);
    const items = engine.listCheckpoints({
      owner,
      sessionId: req.query.get('session_id') ?? undefined,
      baseModel: req.query.get('base_model') ?? undefined,
      type,
    });
    return { body: page(items, after, limit, checkpointJson) };
  });

  router.add('GET', `${P}/checkpoints/:id`, (req) => ({ body: checkpointJson(engine.getCheckpoint(req.params.id!, ownerOf(req))) }));
}

/** Stop strings become token sequences with the model's own tokenizer, where the emulator ships one. */
function stopEncoder(model: string): ((text: string) => number[]) | undefined {
  const tokenizer = bundledTokenizer(model);
  return tokenizer && ((text) => tokenizer.encode(text));
}

function headerValue(h: string | string[] | undefined): string | undefined {
  return Array.isArray(h) ? h[0] : h;
}

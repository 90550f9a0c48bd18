import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { CheckpointRef } from '../engine';
import { badRequest, notFound } from '../errors';
import { parseBody, parseOptimStep } from '../together/requests';
import { encodeForwardBackwardOutput, encodeSampleResponse, decodeForwardBackwardRequest } from './proto';
import { ModelRef, failedOutcome, type TinkerContext } from './context';
import { SampleBody, forwardInput, parseTinkerPath, sampleInput } from './operations';

const SeqOp = ModelRef.extend({ seq_id: z.number().int().min(1, 'seq_id must be ≥ 1 (0 is the model’s create)') });
const CheckpointName = z
  .string()
  .min(1, 'path is required')
  .regex(/^[^/]+$/, 'a checkpoint name cannot contain "/" (it becomes tinker://<model>/weights/<name>)');
/**
 * `ttl_seconds`: tinker 0.38.0 documents "between 1 hour (3600) and 10 years (None = never expires)". That the service
 * refuses less is #44's wording ("the service refuses less"); the SDK checks nothing, and the status and message are
 * not documented, so this 400 is ours.
 */
const TtlSeconds = z
  .number()
  .int()
  .min(3600, 'ttl_seconds must be at least 3600 (1 hour)')
  .max(10 * 365 * 86_400, 'ttl_seconds must be at most 10 years')
  .nullish();
const SaveWeightsBody = SeqOp.extend({ path: CheckpointName, ttl_seconds: TtlSeconds });
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
const SamplerWeightsBody = SeqOp.extend({
  path: CheckpointName.nullish(),
  sampling_session_seq_id: z.number().int().min(0).nullish(),
  ttl_seconds: TtlSeconds,
});
const CreateSamplingSessionBody = z
  .object({
    session_id: z.string().min(1, 'session_id is required'),
    sampling_session_seq_id: z.number().int().min(0),
    model_path: z.string().nullish(),
    base_model: z.string().nullish(),
  })
  .passthrough();
const ttlOf = (b: { ttl_seconds?: number | null }) => (typeof b.ttl_seconds === 'number' ? { ttlSeconds: b.ttl_seconds } : {});

/** Training operations (each in its model's `seq_id` order) and sampling. */
export function addOperationRoutes(ctx: TinkerContext): void {
  const { engine, bySeq, samplers, add, session, model, future, sequenced, createModel } = ctx;

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
        () => ({ kind: 'training-checkpoint', name: b.path, ...ttlOf(b) }),
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
        () => ({ kind: 'inference-checkpoint', name, ...ttlOf(b) }),
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
}

import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { CheckpointRecord, OperationInput, ResourceRecord } from '../engine';
import { parseOptimStep } from '../together/requests';
import { decodeForwardBackwardRequest, encodeForwardBackwardOutput, encodeSampleResponse } from './proto';
import { SampleBody, forwardInput, sampleInput } from './operations';
import {
  ID_MAX_LENGTH,
  ModelRef,
  SKYRL_ID_PATTERN,
  SessionRef,
  ValidationFailed,
  detail,
  hex8,
  parsePath,
  validate,
  type SkyrlContext,
} from './skyrl-context';

const CheckpointName = z.string().max(ID_MAX_LENGTH).regex(SKYRL_ID_PATTERN);
const SeqOp = ModelRef.extend({ seq_id: z.number().int().nullish() });
const SaveWeightsBody = ModelRef.extend({ path: CheckpointName });
const SamplerWeightsBody = SeqOp.extend({ path: CheckpointName.nullish(), sampling_session_seq_id: z.number().int().nullish() });
const LoadWeightsBody = ModelRef.extend({ path: z.string(), optimizer: z.boolean().default(true), seq_id: z.number().int().nullish() });
const SamplingSessionBody = SessionRef.extend({ model_path: z.string().nullish(), base_model: z.string().nullish() });

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

/** Training requests (in arrival order, as SkyRL runs them) and sampling. */
export function addSkyrlOperationRoutes(ctx: SkyrlContext): void {
  const {
    engine,
    served,
    models,
    samplers,
    futures,
    lastRequest,
    add,
    sessionOf,
    modelOf,
    future,
    failure,
    submit,
    checkpointOf,
    reserveName,
  } = ctx;

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
      const op = engine.submitOperation(m.id, owner, `skyrl-sample-${lastRequest()}`, `asample\n${req.rawBody}`, () => input, {
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
}

import { DEFAULT_GRPO_AGGREGATION } from '../../config/rules/loss-units';
import { checkDatum, checkPolicyDatum } from '../datum';
import { ProviderError } from '../errors';
import type { z } from 'zod';
import type {
  CheckpointResult,
  Datum,
  ForwardBackwardOptions,
  ForwardResult,
  OperationHandle,
  OperationKind,
  OptimStepResult,
  PolicyLoss,
  ResourceState,
  SampleResult,
  SessionState,
  TrainerResource,
  TrainingSessionInfo,
  WeightsSyncResult,
} from '../types';
import {
  CheckpointOutput,
  ForwardBackwardOutput,
  OptimStepOutput,
  SampleOutput,
  WeightsSyncOutput,
  type ModelResourcesWire,
  type SessionWire,
} from './wire';

/**
 * The neutral types in Together's wire terms and back: resource and session states, operation routes, resources,
 * sessions, and the datums and loss of a forward-backward.
 */

const RESOURCE_STATES: Record<string, ResourceState> = {
  MODEL_RESOURCES_STATUS_PENDING: 'provisioning',
  MODEL_RESOURCES_STATUS_CREATING: 'provisioning',
  MODEL_RESOURCES_STATUS_READY: 'ready',
  MODEL_RESOURCES_STATUS_STOPPING: 'stopping',
  MODEL_RESOURCES_STATUS_STOPPED: 'stopped',
  MODEL_RESOURCES_STATUS_ERROR: 'failed',
};

const SESSION_STATES: Record<string, SessionState> = {
  TRAINING_SESSION_STATUS_CREATING: 'starting',
  TRAINING_SESSION_STATUS_RUNNING: 'running',
  TRAINING_SESSION_STATUS_STOPPING: 'stopping',
  TRAINING_SESSION_STATUS_STOPPED: 'stopped',
  TRAINING_SESSION_STATUS_ERROR: 'failed',
  TRAINING_SESSION_STATUS_EXPIRED: 'expired',
};

/** Neutral operation kinds → Together's operation routes. */
export const WIRE_KIND: Record<OperationKind, string> = {
  'forward-backward': 'forward-backward',
  'custom-forward-backward': 'custom-forward-backward',
  'optim-step': 'optim-step',
  'training-checkpoint': 'training-checkpoint',
  'sampler-weights': 'inference-checkpoint',
  'weights-sync': 'weights-sync',
  sample: 'sample',
};

export function toResource(w: ModelResourcesWire): TrainerResource {
  return {
    id: w.id,
    model: w.base_model,
    state: RESOURCE_STATES[w.status] ?? 'provisioning',
    providerStatus: w.status,
    createdAt: w.created_at,
    createdBy: w.created_by,
    error: w.error?.message,
    errorCode: w.error?.code?.replace('MODEL_RESOURCES_ERROR_CODE_', ''),
    queuePosition: w.status_details?.queue_position || undefined,
  };
}

export function toSession(w: SessionWire): TrainingSessionInfo {
  return {
    id: w.id,
    resourceId: w.model_resources_id,
    state: SESSION_STATES[w.status] ?? 'starting',
    step: w.step,
    trainingCheckpointIds: (w.training_checkpoints ?? []).map((c) => c.id),
    displayName: w.display_name ?? undefined,
  };
}

function sampleBody(d: Datum, index: number): Record<string, unknown> {
  checkDatum(d, index);
  return {
    model_input: { chunks: [{ encoded_text: { tokens: d.modelInput } }] },
    loss_fn_inputs: {
      target_tokens: { data: d.targetTokens, dtype: 'int64' },
      weights: { data: d.weights, dtype: 'float32' },
    },
  };
}

/** A policy-loss sample: the cross-entropy tensors plus `logprobs`, `advantages` (and `reference_logprobs`), float32. */
function policySampleBody(d: Datum, index: number, needReference: boolean): Record<string, unknown> {
  checkPolicyDatum(d, index, needReference);
  const body = sampleBody(d, index) as { loss_fn_inputs: Record<string, unknown> };
  body.loss_fn_inputs.logprobs = { data: d.logprobs, dtype: 'float32' };
  body.loss_fn_inputs.advantages = { data: d.advantages, dtype: 'float32' };
  if (needReference) body.loss_fn_inputs.reference_logprobs = { data: d.referenceLogprobs, dtype: 'float32' };
  return body;
}

const GRPO_AGGREGATION = {
  token_mean: 'GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN',
  sequence_mean: 'GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN',
  fixed_horizon: 'GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON',
} as const;

function clipParams(loss: { clipLow?: number; clipHigh?: number }): Record<string, number> {
  return {
    ...(loss.clipLow !== undefined ? { clip_low_threshold: loss.clipLow } : {}),
    ...(loss.clipHigh !== undefined ? { clip_high_threshold: loss.clipHigh } : {}),
  };
}

/** The neutral loss → Together's `LossConfig` and samples. */
export function lossBody(loss: PolicyLoss, data: Datum[]): { loss: Record<string, unknown>; samples: Record<string, unknown>[] } {
  switch (loss.type) {
    case 'cross_entropy':
      return { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: data.map(sampleBody) };
    case 'importance_sampling':
      return { loss: { type: 'LOSS_TYPE_IMPORTANCE_SAMPLING' }, samples: data.map((d, i) => policySampleBody(d, i, false)) };
    case 'ppo':
      return { loss: { type: 'LOSS_TYPE_PPO', ppo_params: clipParams(loss) }, samples: data.map((d, i) => policySampleBody(d, i, false)) };
    case 'grpo': {
      const beta = loss.beta ?? 0;
      if (!(beta >= 0)) throw new ProviderError('INVALID_INPUT', 'non-retryable', `grpo beta must be ≥ 0, got ${beta}`);
      const grpoParams: Record<string, unknown> = {
        ...clipParams(loss),
        ...(loss.beta !== undefined ? { beta } : {}),
        // Always sent: Together does not document its default, and the loss's unit (sum or mean) follows it.
        agg_type: GRPO_AGGREGATION[loss.aggregation ?? DEFAULT_GRPO_AGGREGATION],
        ...(loss.ratio ? { ratio_type: loss.ratio === 'sequence' ? 'GRPO_LOSS_RATIO_TYPE_SEQUENCE' : 'GRPO_LOSS_RATIO_TYPE_TOKEN' } : {}),
      };
      return { loss: { type: 'LOSS_TYPE_GRPO', grpo_params: grpoParams }, samples: data.map((d, i) => policySampleBody(d, i, beta > 0)) };
    }
  }
}

/** An operation's output on the wire, as the neutral result of its kind (a BAD_RESPONSE when it does not parse). */
export function decodeOutput(handle: OperationHandle<unknown>, output: unknown): unknown {
  const where = `${handle.kind} operation ${handle.operationId}`;
  const parse = <S extends z.ZodTypeAny>(schema: S): z.infer<S> => {
    const parsed = schema.safeParse(output);
    if (!parsed.success)
      throw new ProviderError('BAD_RESPONSE', 'non-retryable', `${where}: unexpected output: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  };
  switch (handle.kind) {
    case 'forward-backward': {
      const o = parse(ForwardBackwardOutput);
      const result: ForwardResult = { loss: o.loss };
      if (o.loss_fn_outputs) result.logprobs = o.loss_fn_outputs.map((l) => l.tensors.logprobs.data);
      return result;
    }
    case 'custom-forward-backward':
      return {};
    case 'optim-step':
      return { step: parse(OptimStepOutput).step } satisfies OptimStepResult;
    case 'training-checkpoint':
    case 'sampler-weights': {
      const o = parse(CheckpointOutput);
      return { checkpointId: o.checkpoint.id, step: o.checkpoint.step } satisfies CheckpointResult;
    }
    case 'weights-sync':
      return { weightsVersion: parse(WeightsSyncOutput).weights_version } satisfies WeightsSyncResult;
    case 'sample':
      return parse(SampleOutput).results.map((r): SampleResult => ({
        sequences: r.sequences.map((s) => ({
          tokens: s.tokens,
          logprobs: s.logprobs ?? undefined,
          stopReason: s.stop_reason === 'STOP_REASON_STOP' ? 'stop' : 'length',
        })),
        promptLogprobs: r.prompt_logprobs?.map((v) => v ?? 0),
        policyVersion: r.policy_segments?.[0]?.version,
      }));
  }
}

/** A GRPO forward-backward body as Roundhouse sent it before #44: without the default `agg_type` (undefined: not GRPO, or not the default). */
export function legacyGrpoBody<B extends { loss: Record<string, unknown> }>(body: B, loss: ForwardBackwardOptions['loss']): B | undefined {
  if (loss?.type !== 'grpo' || (loss.aggregation ?? DEFAULT_GRPO_AGGREGATION) !== DEFAULT_GRPO_AGGREGATION) return undefined;
  const params = { ...(body.loss.grpo_params as Record<string, unknown>) };
  delete params.agg_type;
  return { ...body, loss: { ...body.loss, grpo_params: params } };
}

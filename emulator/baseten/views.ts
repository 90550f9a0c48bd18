import type { CheckpointRecord, ResourceRecord } from '../engine';
import type { EmulatorRequest } from '../http';
import { checkpointPath } from './requests';
import { isActive, originOf, runExtra, type RunExtra, type SamplerInfo } from './state';

/**
 * Baseten Loops' objects as its management API shows them (providers/baseten/WIRE.md §2): runs, samplers,
 * deployments and checkpoints from the engine's records, with ISO times, run status ACTIVE/INACTIVE and deployment
 * status CREATED/DEPLOYING/RUNNING/SCALED_TO_ZERO/FAILED/STOPPED/PREEMPTED.
 */

export const iso = (ms: number) => new Date(ms).toISOString();

export function userOf(owner: string): { email: string } {
  return { email: `${owner}@emulator.roundhouse.local` };
}

export function trainerUrl(req: EmulatorRequest, runId: string): string {
  return `${originOf(req)}/baseten/trainers/${runId}`;
}

export function samplerUrl(req: EmulatorRequest, samplerId: string): string {
  return `${originOf(req)}/baseten/samplers/${samplerId}/sync`;
}

/** Trainer deployment status, from the engine's resource status. */
export function deploymentStatus(r: ResourceRecord): string {
  switch (r.status) {
    case 'PENDING':
      return 'CREATED';
    case 'CREATING':
      return 'DEPLOYING';
    case 'READY':
      return 'RUNNING';
    case 'ERROR':
      return preempted(r) ? 'PREEMPTED' : 'FAILED';
    default:
      // Stopped without a deactivation: the idle scale-down (scale_down_delay_seconds) did it.
      return (r.extra as { deactivatedAt?: number }).deactivatedAt === undefined ? 'SCALED_TO_ZERO' : 'STOPPED';
  }
}

/** A reclaimed GPU (an injected `preempt`, on any run), or a spot run whose resource died. */
function preempted(r: ResourceRecord): boolean {
  const code = r.error?.code;
  return code === 'PREEMPTED' || (code === 'RESOURCE_UNAVAILABLE' && (r.extra as Partial<RunExtra>).availabilityModel === 'spot');
}

/** Sampler status (the generic model-deployment statuses), from the resource that serves it. */
export function samplerStatus(r: ResourceRecord): string {
  switch (r.status) {
    case 'PENDING':
    case 'CREATING':
      return 'DEPLOYING';
    case 'READY':
      return 'ACTIVE';
    case 'STOPPING':
      return 'DEACTIVATING';
    case 'ERROR':
      return 'FAILED';
    default:
      return (r.extra as { deactivatedAt?: number }).deactivatedAt === undefined ? 'SCALED_TO_ZERO' : 'INACTIVE';
  }
}

export function samplerJson(req: EmulatorRequest, r: ResourceRecord, s: SamplerInfo): Record<string, unknown> {
  return {
    id: s.id,
    base_url: samplerUrl(req, s.id),
    base_model: r.model.name,
    created_at: iso(s.createdAt),
    model_id: s.modelId,
    deployment_id: s.deploymentId,
    status: { name: samplerStatus(r) },
    user: userOf(r.owner),
    instance_type: instanceType(r),
    node_count: 1,
    // Not in the schema (the SDK ignores extra fields):
    run_id: s.runId ?? s.duplicateOf ?? null,
    session_id: s.sessionId,
    ...(s.modelPath ? { model_path: s.modelPath } : {}),
  };
}

function instanceType(r: ResourceRecord): Record<string, unknown> {
  const gpu = r.model.gpuType.startsWith('H100') ? 'H100' : 'B200';
  return {
    id: `${gpu}x${r.model.gpuCount}`,
    name: `${r.model.gpuCount}x${gpu}`,
    memory_limit_mib: 0,
    millicpu_limit: 0,
    gpu_count: r.model.gpuCount,
    gpu_type: gpu,
    gpu_memory_limit_mib: gpu === 'H100' ? 81_920 : 184_320,
  };
}

export function runJson(req: EmulatorRequest, r: ResourceRecord): Record<string, unknown> {
  const x = runExtra(r);
  return {
    id: r.id,
    session_id: x.sessionId,
    deployment_id: x.deploymentId,
    name: x.name,
    base_model: r.model.name,
    base_url: trainerUrl(req, r.id),
    created_at: iso(r.createdAt),
    status: { name: isActive(r) ? 'ACTIVE' : 'INACTIVE' },
    user: userOf(r.owner),
    sampler: x.sampler ? samplerJson(req, r, x.sampler) : null,
    // Not in the schema: the create fields as applied, and why the run ended.
    lora_rank: x.loraRank,
    max_seq_len: x.maxSeqLen,
    seed: x.seed ?? null,
    replicas: x.replicas,
    availability_model: x.availabilityModel,
    scale_down_delay_seconds: x.scaleDownDelaySeconds,
    deployment_status: deploymentStatus(r),
    ...(x.path ? { path: x.path } : {}),
    reused_from_run_id: x.reusedFromRunId ?? null,
    ...(x.replacedBy ? { replaced_by: x.replacedBy } : {}),
    ...(r.error ? { error: { code: r.error.code, message: r.error.message } } : {}),
  };
}

export function deploymentJson(req: EmulatorRequest, r: ResourceRecord): Record<string, unknown> {
  const x = runExtra(r);
  return {
    id: x.deploymentId,
    active_run_id: isActive(r) ? r.id : null,
    latest_run_id: r.id,
    base_model: r.model.name,
    base_url: trainerUrl(req, r.id),
    status: { name: deploymentStatus(r) },
    user: userOf(r.owner),
    created_at: iso(r.createdAt),
    availability_model: x.availabilityModel,
    instance_type: instanceType(r),
    node_count: x.replicas,
    sampler: x.sampler ? samplerJson(req, r, x.sampler) : null,
  };
}

/** The files a checkpoint downloads as: a PEFT-style config, the adapter state, and the trainer state. */
export function checkpointFiles(c: CheckpointRecord): { name: string; content: unknown }[] {
  const files: { name: string; content: unknown }[] = [
    { name: 'adapter_config.json', content: { peft_type: 'LORA', r: c.loraRank, base_model_name_or_path: c.baseModel } },
    { name: 'adapter_state.json', content: { ...c.state, optimizer: undefined } },
  ];
  if (c.type === 'training') files.push({ name: 'trainer_state.json', content: { step: c.step, optimizer: c.state.optimizer ?? null } });
  return files;
}

export function checkpointJson(c: CheckpointRecord): Record<string, unknown> {
  const target = c.type === 'training' ? 'trainer' : 'sampler';
  return {
    id: c.id,
    checkpoint_id: c.name ?? c.id,
    run_id: c.resourceId,
    created_at: iso(c.createdAt),
    checkpoint_type: 'lora',
    base_model: c.baseModel,
    lora_adapter_config: { r: c.loraRank },
    size_bytes: checkpointFiles(c).reduce((a, f) => a + Buffer.byteLength(JSON.stringify(f.content)), 0),
    sync_status: 'COMPLETE',
    target,
    // Not in the schema:
    path: checkpointPath(c.resourceId, target, c.name ?? c.id),
    step: c.step,
  };
}

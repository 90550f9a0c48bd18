import type { z } from 'zod';
import { ProviderError } from '../errors';
import type { HttpClient } from '../http';
import type { BasetenRunOptions, ModelInfo, ProvisionRequest, ResourceState, SessionState, TrainerResource } from '../types';
import {
  AnyJson,
  CapabilitiesWire,
  CheckpointsEnvelope,
  DeploymentEnvelope,
  DeploymentsEnvelope,
  RunEnvelope,
  RunsEnvelope,
  SamplerEnvelope,
  SamplersEnvelope,
  SessionEnvelope,
  type RunWire,
  type SamplerWire,
} from './wire';

/**
 * The Loops control plane (`/v1/loops/…`): runs (a trainer, with its paired sampler) in Loops sessions, their
 * deployments, samplers billed on their own, and the runs' checkpoints. Runs are kept as last fetched: their trainer
 * URLs are where the data planes are (planes.ts).
 */
export class LoopsControlPlane {
  private readonly runs = new Map<string, RunWire>();
  private readonly samplers = new Map<string, { baseUrl: string; dedicated: boolean }>();

  constructor(private readonly http: HttpClient) {}

  /** The models Loops trains (`/v1/loops/capabilities`). */
  async supportedModels(): Promise<ModelInfo[]> {
    const res = await this.http.request({ method: 'GET', path: '/v1/loops/capabilities', schema: CapabilitiesWire });
    return res.supported_models.map((m) => ({
      name: m.model_name,
      maxLoraRank: m.max_lora_rank ?? 64,
      maxSeqLen: m.max_seq_len ?? m.max_context_length ?? 8192,
      maxBatchSize: m.max_batch_size ?? 256,
      vocabSize: m.vocab_size ?? undefined,
      tokenizer: m.tokenizer ?? m.model_name,
      gpuCount: m.gpu_count ?? undefined,
    }));
  }

  /**
   * A new Loops session, then a run in it named after the owner tag. A create whose answer is lost is
   * reconciled by listing the session's runs (never resent): the one run found is the one created.
   */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    if (!request.ownerTag || request.ownerTag.length > 255) {
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        `ownerTag must be 1 to 255 characters (it is the run's name), got ${request.ownerTag.length}`,
      );
    }
    if (request.baseten?.reuseFromRunId) await this.checkReusable(request.model, request.baseten.reuseFromRunId);
    // An empty session holds no GPUs, so resending its create after a lost answer is harmless.
    const session = await this.http.request({ method: 'POST', path: '/v1/loops/sessions', replaySafe: true, schema: SessionEnvelope });
    const model = request.trainer ? (await this.supportedModels()).find((m) => m.name === request.model) : undefined;
    const body = createRunBody(session.session.id, request, model?.maxSeqLen);
    // `/runs` pairs a sampler with the trainer; `/trainers` is the trainer alone (a sampler can be paired later).
    const path = (request.generatorReplicas ?? 1) > 0 ? '/v1/loops/runs' : '/v1/loops/trainers';
    let run: RunWire;
    try {
      run = (await this.http.request({ method: 'POST', path, body, schema: RunEnvelope })).run;
    } catch (err) {
      if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
      const found = await this.sessionRuns(session.session.id);
      if (found.length === 0) throw err; // not created (yet): the caller lists again before creating anew
      run = found[0]!;
    }
    this.runs.set(run.id, run);
    return this.describe(run);
  }

  /** A run to reuse must be the team's and of the same base model (the docs): said of the spec's field before any create. */
  private async checkReusable(model: string, runId: string): Promise<void> {
    const refuse = (why: string) =>
      new ProviderError('INVALID_INPUT', 'non-retryable', `provider.baseten.reuseFromRunId: run ${runId} ${why}; nothing was created`);
    let prior: RunWire;
    try {
      prior = await this.fetchRun(runId);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) throw refuse('is not a run of this team');
      throw err;
    }
    if (prior.base_model !== model)
      throw refuse(`is a run of ${prior.base_model}, not ${model}: a run reuses only one of the same base model`);
  }

  /** The run as a trainer resource, as the control plane sees it now. */
  async resource(runId: string): Promise<TrainerResource> {
    return this.describe(await this.fetchRun(runId));
  }

  async listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    const [runs, deployments] = await Promise.all([
      this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs),
      this.listAll('/v1/loops/deployments', DeploymentsEnvelope, (page) => page.deployments),
    ]);
    const statusOf = new Map(deployments.map((d) => [d.id, d.status.name]));
    return runs
      .filter((r) => !options.activeOnly || r.status.name === 'ACTIVE')
      .map((r) => toResource(r, r.deployment_id ? statusOf.get(r.deployment_id) : undefined));
  }

  /**
   * Samplers billed on their own: every listed sampler that is no run's paired sampler (those stop with their run) and
   * still holds GPUs. Roundhouse creates none on purpose; one exists when a resent create was applied twice. Its owner
   * tag is its run's (or its session's) where the listing names them (the emulator does; the service's schema does
   * not, so there such a sampler is untagged).
   */
  async listStrayResources(): Promise<TrainerResource[]> {
    const { runs, samplers } = await this.straySamplers();
    const tagOf = (s: SamplerWire) =>
      (runs.find((r) => r.id === s.run_id) ?? runs.find((r) => s.session_id && r.session_id === s.session_id))?.name || undefined;
    return samplers.map((s) => {
      const tag = tagOf(s);
      return { ...samplerResource(s), ...(tag ? { ownerTag: tag } : {}) };
    });
  }

  /** The runs, and the samplers that still hold GPUs and are no run's paired sampler. */
  private async straySamplers(): Promise<{ runs: RunWire[]; samplers: SamplerWire[] }> {
    const [runs, samplers] = await Promise.all([
      this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs),
      this.listAll('/v1/loops/samplers', SamplersEnvelope, (page) => page.samplers),
    ]);
    const paired = new Set(runs.flatMap((r) => (r.sampler ? [r.sampler.id] : [])));
    return { runs, samplers: samplers.filter((s) => !paired.has(s.id) && samplerHoldsGpus(s)) };
  }

  /** Every page of a listing: the service documents no paging for these, so a `next_page_token` is followed if given. */
  private async listAll<P extends { next_page_token?: number | string | null }, T>(
    path: string,
    schema: z.ZodType<P>,
    items: (page: NoInfer<P>) => T[],
    query: Record<string, string> = {},
  ): Promise<T[]> {
    const out: T[] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    for (;;) {
      const page = await this.http.request({ method: 'GET', path, query: token ? { ...query, page_token: token } : query, schema });
      out.push(...items(page));
      const next = page.next_page_token;
      if (next === undefined || next === null || next === '' || seen.has(String(next))) return out;
      seen.add(String(next));
      if (seen.size > 10_000) throw new ProviderError('INVALID_RESPONSE', 'retryable', `${path} kept paging past 10,000 pages`);
      token = String(next);
    }
  }

  /** Deactivates the run and every other active run of its Loops session (a duplicate from an unclear create). */
  async deactivate(resourceId: string): Promise<TrainerResource> {
    let run: RunWire;
    try {
      run = await this.fetchRun(resourceId);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return this.deactivateSampler(resourceId);
      throw err;
    }
    await this.releaseSession(run.session_id);
    return this.resource(resourceId);
  }

  /** A sampler billed on its own (what `listStrayResources` lists), by its id; not found is stopped. */
  private async deactivateSampler(samplerId: string): Promise<TrainerResource> {
    const path = `/v1/loops/samplers/${encodeURIComponent(samplerId)}`;
    try {
      await this.http.request({ method: 'POST', path: `${path}/deactivate`, replaySafe: true, schema: AnyJson });
      return samplerResource((await this.http.request({ method: 'GET', path, schema: SamplerEnvelope })).sampler);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404)
        return { id: samplerId, model: '', state: 'stopped', providerStatus: 'NOT_FOUND', createdAt: '' };
      throw err;
    }
  }

  /**
   * Deactivates every active run of a Loops session (what the guide's `release_session` does), and every sampler of
   * the session billed on its own (a duplicate from a resent create, where the listing names its session); returns
   * the runs' ids.
   */
  async releaseSession(sessionId: string): Promise<string[]> {
    const runs = await this.sessionRuns(sessionId);
    const active = runs.filter((r) => r.status.name === 'ACTIVE');
    // A sampler is paired with a run of its own session, so the session's runs say which of its samplers are strays
    // (listing every run of the account here made each release cost as much as the account is large).
    const paired = new Set(runs.flatMap((r) => (r.sampler ? [r.sampler.id] : [])));
    const samplers = await this.listAll('/v1/loops/samplers', SamplersEnvelope, (page) => page.samplers);
    const strays = samplers.filter(
      (x) => (x.session_id === sessionId || runs.some((r) => r.id === x.run_id)) && !paired.has(x.id) && samplerHoldsGpus(x),
    );
    for (const s of strays) await this.deactivateSampler(s.id);
    for (const r of active) {
      try {
        // Deactivating twice answers the same, so a resend after a lost answer is harmless.
        await this.http.request({
          method: 'POST',
          path: `/v1/loops/runs/${encodeURIComponent(r.id)}/deactivate`,
          replaySafe: true,
          schema: RunDeactivated,
        });
      } catch (err) {
        if (!(err instanceof ProviderError && err.status === 404)) throw err;
      }
    }
    return active.map((r) => r.id);
  }

  /** Runs of a Loops session, newest first. The service filters runs by id and model only, so the session filter is applied here too. */
  private async sessionRuns(sessionId: string): Promise<RunWire[]> {
    const runs = await this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs, { session_id: sessionId });
    return runs.filter((r) => r.session_id === sessionId);
  }

  async fetchRun(runId: string): Promise<RunWire> {
    const { run } = await this.http.request({ method: 'GET', path: `/v1/loops/runs/${encodeURIComponent(runId)}`, schema: RunEnvelope });
    this.runs.set(run.id, run);
    return run;
  }

  async runInfo(runId: string): Promise<RunWire> {
    return this.runs.get(runId) ?? this.fetchRun(runId);
  }

  private async deploymentStatus(deploymentId: string): Promise<string | undefined> {
    try {
      return (
        await this.http.request({
          method: 'GET',
          path: `/v1/loops/deployments/${encodeURIComponent(deploymentId)}`,
          schema: DeploymentEnvelope,
        })
      ).deployment.status.name;
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return undefined;
      throw err;
    }
  }

  async describe(run: RunWire): Promise<TrainerResource> {
    return toResource(run, run.deployment_id ? await this.deploymentStatus(run.deployment_id) : undefined);
  }

  /** The run's trainer checkpoints (oldest first), named by their `bt://` paths: what `openSession` resumes from. */
  async trainingCheckpoints(runId: string): Promise<string[]> {
    const res = await this.http.request({
      method: 'GET',
      path: '/v1/loops/checkpoints',
      query: { run_id: runId },
      schema: CheckpointsEnvelope,
    });
    return res.checkpoints
      .filter((c) => c.target === 'trainer')
      .sort((a, b) => a.created_at.localeCompare(b.created_at))
      .map((c) => `bt://loops:${c.run_id}/weights/${c.checkpoint_id}`);
  }

  /** The run's paired sampler: the one it has, or one created now (idempotent per run). */
  async pairedSampler(runId: string): Promise<{ baseUrl: string; dedicated: boolean }> {
    const known = this.samplers.get(runId);
    if (known) return known;
    const run = await this.fetchRun(runId);
    const sampler =
      run.sampler ??
      (
        await this.http.request({
          method: 'POST',
          path: '/v1/loops/samplers',
          body: { session_id: run.session_id, run_id: run.id },
          replaySafe: true,
          schema: SamplerEnvelope,
        })
      ).sampler;
    // A sampler without a model id is serverless (queued); a dedicated one answers /sample directly.
    const info = { baseUrl: sampler.base_url, dedicated: Boolean(sampler.model_id) };
    this.samplers.set(runId, info);
    return info;
  }
}

/**
 * What the run is created with (`CreateLoopsRunRequest`): the round's seed, longest sequence and LoRA rank, and the
 * spec's run settings, each sent explicitly so the run is what was asked for, not the service's defaults (lora_rank 64).
 */
function createRunBody(sessionId: string, request: ProvisionRequest, modelMaxSeqLen: number | undefined): Record<string, unknown> {
  const run = request.baseten ?? BASETEN_RUN_DEFAULTS;
  const trainer = request.trainer;
  return {
    session_id: sessionId,
    base_model: request.model,
    name: request.ownerTag,
    availability_model: run.availabilityModel,
    replicas: run.replicas,
    scale_down_delay_seconds: run.scaleDownDelaySeconds,
    ...(run.reuseFromRunId ? { reuse_from_run_id: run.reuseFromRunId } : {}),
    // The data was checked against the smaller of training.maxSeqLen and the model's; a longer max_seq_len is refused.
    ...(trainer
      ? { seed: trainer.seed, max_seq_len: Math.min(trainer.maxSeqLen, modelMaxSeqLen ?? Infinity), lora_rank: trainer.loraRank }
      : {}),
  };
}

/** The service's documented defaults (a dedicated run of one replica, scaled to zero after 15 idle minutes). */
export const BASETEN_RUN_DEFAULTS: BasetenRunOptions = { availabilityModel: 'dedicated', replicas: 1, scaleDownDelaySeconds: 900 };

const RunDeactivated = RunEnvelope.shape.run.pick({ id: true }).passthrough();

function toResource(run: RunWire, deployment: string | undefined): TrainerResource {
  return {
    id: run.id,
    model: run.base_model,
    state: resourceState(run.status.name, deployment),
    providerStatus: deployment ? `${run.status.name}/${deployment}` : run.status.name,
    createdAt: run.created_at,
    createdBy: run.user?.email ?? undefined,
    ownerTag: run.name,
    ...(run.error?.code ? { error: run.error.message ?? undefined, errorCode: run.error.code } : {}),
  };
}

/** The run says ACTIVE or INACTIVE; its trainer deployment says where in its life it is. */
const SAMPLER_STOPPED = new Set(['INACTIVE', 'FAILED', 'DEPLOY_FAILED', 'BUILD_FAILED', 'BUILD_STOPPED']);

/** A sampler holds GPUs in every status but the ended ones (deactivating still bills until it is inactive). */
function samplerHoldsGpus(s: SamplerWire): boolean {
  return !SAMPLER_STOPPED.has(s.status?.name ?? 'ACTIVE');
}

function samplerResource(s: SamplerWire): TrainerResource {
  const status = s.status?.name ?? 'UNKNOWN';
  return {
    id: s.id,
    model: s.base_model ?? '',
    state: SAMPLER_STOPPED.has(status) ? 'stopped' : status === 'DEACTIVATING' ? 'stopping' : 'ready',
    providerStatus: `SAMPLER/${status}`,
    createdAt: s.created_at ?? '',
    createdBy: s.user?.email ?? undefined,
  };
}

function resourceState(run: string, deployment: string | undefined): ResourceState {
  if (deployment === 'FAILED' || deployment === 'PREEMPTED') return 'failed';
  if (run !== 'ACTIVE') return 'stopped';
  if (deployment === 'CREATED' || deployment === 'DEPLOYING') return 'provisioning';
  if (deployment === 'STOPPED') return 'stopping';
  return 'ready'; // RUNNING, SCALED_TO_ZERO (wakes on use), or serverless (no deployment)
}

export function sessionState(resource: TrainerResource): SessionState {
  switch (resource.state) {
    case 'provisioning':
      return 'starting';
    case 'ready':
      return 'running';
    case 'failed':
      return 'failed';
    case 'stopping':
      return 'stopping';
    case 'stopped':
      return resource.providerStatus.endsWith('SCALED_TO_ZERO') ? 'expired' : 'stopped';
  }
}

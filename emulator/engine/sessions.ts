import { badRequest, tooManyRequests } from '../errors';
import { shortId } from './ids';
import type { Lifecycle } from './lifecycle';
import type { CheckpointRecord, LoraSettings, ResourceRecord, SessionRecord, SessionStatus } from './records';
import type { Resources } from './resources';
import { LIVE_SESSION, learnerOptions, newestFirst, noteTrainer, ownedOrNotFound, type EngineState } from './state';

export interface SessionInput {
  /** A dialect-shaped id; generated when absent. */
  id?: string;
  resourceId: string;
  owner: string;
  lora?: Partial<LoraSettings>;
  resumeFromCheckpointId?: string;
  loadOptimizer?: boolean;
  displayName?: string;
  metadata?: Record<string, unknown>;
}

export interface SessionFilter {
  owner?: string;
  resourceId?: string;
  statuses?: SessionStatus[];
}

/** Training sessions: each owns a trainer learner and a generator learner on a ready resource. */
export class Sessions {
  constructor(
    private readonly state: EngineState,
    private readonly lifecycle: Lifecycle,
    private readonly resources: Resources,
  ) {}

  async create(input: SessionInput): Promise<SessionRecord> {
    const r = this.resources.get(input.resourceId, input.owner);
    if (r.status !== 'READY') {
      throw badRequest(`model resource ${r.id} is ${r.status.toLowerCase()}; sessions attach to a ready resource`, 'FAILED_PRECONDITION');
    }
    this.checkSessionCap(r);

    const checkpoint = this.resumeCheckpoint(input, r);
    const rank = checkpoint?.loraRank ?? input.lora?.rank ?? 8;
    if (!Number.isInteger(rank) || rank < 1 || rank > r.model.maxLoraRank) {
      throw badRequest(`lora_config.rank must be an integer from 1 to ${r.model.maxLoraRank} for ${r.model.name}`);
    }
    const lora: LoraSettings = { ...input.lora, rank };
    const options = learnerOptions(r.model, lora);
    const restoreOptimizer = checkpoint?.type === 'training' && input.loadOptimizer !== false && checkpoint.withOptimizer;
    const learner = checkpoint
      ? await this.state.models.fromState(options, checkpoint.state, { optimizer: restoreOptimizer })
      : await this.state.models.create(options);
    const generator = await this.state.models.fromState(options, learner.exportState({ withOptimizer: false }), { optimizer: false });

    const now = this.state.now();
    const session: SessionRecord = {
      id: input.id ?? shortId('sess'),
      resourceId: r.id,
      owner: input.owner,
      status: 'RUNNING',
      createdAt: now,
      updatedAt: now,
      lastActivityAt: now,
      lora,
      resumeFromCheckpointId: input.resumeFromCheckpointId,
      loadOptimizer: input.loadOptimizer,
      displayName: input.displayName,
      metadata: input.metadata ?? {},
      optimizerSteps: 0,
      emptyOptimizerSteps: 0,
      operationsSubmitted: 0,
      duplicatesAbsorbed: 0,
      weightsVersion: learner.step,
      checkpointIds: [],
    };
    noteTrainer(session, learner);
    this.state.sessions.set(session.id, session);
    this.state.runtimes.set(session.id, { learner, generator, queue: [], pumping: false });
    r.lastActivityAt = now;
    this.state.changed();
    return session;
  }

  /**
   * Together's cap on concurrent sessions per resource: a LoRA resource takes its model's cap, a full-weight one takes
   * 1; one more is refused with 429 and a Retry-After (the SDK's session client retries it, up to 7 times). A stopping
   * session still holds its slot until it has stopped.
   */
  private checkSessionCap(r: ResourceRecord): void {
    const cap = r.loraEnabled ? this.state.loraSessionCap(r.model) : 1;
    const live = this.state.liveSessionsOn(r.id).length;
    if (live < cap) return;
    const kind = r.loraEnabled ? `a LoRA resource of ${r.model.name}` : 'a full-weight resource';
    throw tooManyRequests(
      `model resource ${r.id} already has ${live} active training session${live === 1 ? '' : 's'}; ${kind} accepts at most ${cap} concurrent session${cap === 1 ? '' : 's'} (limit ${cap}). Stop one first`,
    );
  }

  /** The checkpoint a new session resumes from, checked against the resource and the resume flags. */
  private resumeCheckpoint(input: SessionInput, r: ResourceRecord): CheckpointRecord | undefined {
    if (!input.resumeFromCheckpointId) {
      if (input.loadOptimizer !== undefined) throw badRequest('load_optimizer requires resume_from_checkpoint_id');
      return undefined;
    }
    const checkpoint = ownedOrNotFound(
      this.state.checkpoints.get(input.resumeFromCheckpointId),
      input.owner,
      'checkpoint',
      input.resumeFromCheckpointId,
    );
    if (checkpoint.baseModel !== r.model.name) {
      throw badRequest(`checkpoint ${checkpoint.id} was trained on ${checkpoint.baseModel}, not ${r.model.name}`);
    }
    if (checkpoint.type === 'inference' && input.loadOptimizer !== undefined) {
      throw badRequest('load_optimizer is only valid when resuming from a training checkpoint');
    }
    return checkpoint;
  }

  get(id: string, owner?: string): SessionRecord {
    const known = this.state.sessions.get(id);
    if (known) this.lifecycle.refreshAround(known.resourceId);
    return ownedOrNotFound(this.state.sessions.get(id), owner, 'training session', id);
  }

  list(filter: SessionFilter): SessionRecord[] {
    this.lifecycle.refresh();
    return [...this.state.sessions.values()]
      .filter((s) => filter.owner === undefined || s.owner === filter.owner)
      .filter((s) => filter.resourceId === undefined || s.resourceId === filter.resourceId)
      .filter((s) => !filter.statuses?.length || filter.statuses.includes(s.status))
      .sort(newestFirst);
  }

  update(id: string, owner: string, patch: { displayName?: string; metadata?: Record<string, unknown> }): SessionRecord {
    const s = this.get(id, owner);
    if (patch.displayName !== undefined) s.displayName = patch.displayName === '' ? undefined : patch.displayName;
    if (patch.metadata !== undefined) s.metadata = patch.metadata;
    s.updatedAt = this.state.now();
    this.state.changed();
    return s;
  }

  /** STOPPING now, STOPPED after the stop delay; a session already stopping or over is left as it is. */
  stop(id: string, owner: string): SessionRecord {
    const s = this.get(id, owner);
    if (LIVE_SESSION.has(s.status) && s.status !== 'STOPPING') {
      s.status = 'STOPPING';
      s.stopRequestedAt = this.state.now();
      s.updatedAt = this.state.now();
      this.lifecycle.refreshSession(s, this.state.now());
      this.state.changed();
    }
    return s;
  }
}

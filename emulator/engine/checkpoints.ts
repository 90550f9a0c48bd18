import { LearnerInputError, type TrainerModel } from '../learner';
import { shortId } from './ids';
import type { CheckpointRecord, CheckpointRef, SessionRecord } from './records';
import { learnerOptions, newestFirst, ownedOrNotFound, type EngineState, type SessionRuntime } from './state';

export interface CheckpointFilter {
  owner?: string;
  sessionId?: string;
  type?: 'training' | 'inference';
  baseModel?: string;
}

/** Training checkpoints (weights + optimizer + step) and inference checkpoints (weights), saved by operations. */
export class Checkpoints {
  constructor(private readonly state: EngineState) {}

  list(filter: CheckpointFilter): CheckpointRecord[] {
    return [...this.state.checkpoints.values()]
      .filter((c) => filter.owner === undefined || c.owner === filter.owner)
      .filter((c) => filter.sessionId === undefined || c.sessionId === filter.sessionId)
      .filter((c) => filter.type === undefined || c.type === filter.type)
      .filter((c) => filter.baseModel === undefined || c.baseModel === filter.baseModel)
      .sort(newestFirst);
  }

  /** A checkpoint by id, or the latest saved under a name on a resource; undefined when there is none. */
  find(ref: CheckpointRef, owner?: string): CheckpointRecord | undefined {
    if ('id' in ref) {
      const c = this.state.checkpoints.get(ref.id);
      return c && (owner === undefined || c.owner === owner) ? c : undefined;
    }
    return this.list({ owner, type: ref.type }).find((c) => c.resourceId === ref.resourceId && c.name === ref.name);
  }

  get(id: string, owner?: string): CheckpointRecord {
    return ownedOrNotFound(this.state.checkpoints.get(id), owner, 'checkpoint', id);
  }

  /** The checkpoints a session saved, in the order it saved them. */
  ofSession(s: SessionRecord): CheckpointRecord[] {
    return s.checkpointIds.flatMap((id) => this.state.checkpoints.get(id) ?? []);
  }

  /** Saves the session's trainer weights (with the optimizer for a training checkpoint). */
  save(
    s: SessionRecord,
    rt: SessionRuntime,
    type: 'training' | 'inference',
    name: string | undefined,
    ttlSeconds?: number,
  ): CheckpointRecord {
    const training = type === 'training';
    const checkpoint: CheckpointRecord = {
      id: shortId(training ? 'ckpt-train' : 'ckpt-infer'),
      type,
      owner: s.owner,
      sessionId: s.id,
      resourceId: s.resourceId,
      baseModel: this.state.resourceOf(s).model.name,
      step: rt.learner.step,
      createdAt: this.state.now(),
      loraRank: s.lora.rank,
      withOptimizer: training,
      lineageEmptyOptimizerSteps: rt.learner.emptyOptimizerSteps,
      state: rt.learner.exportState({ withOptimizer: training }),
      name,
      ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
    };
    this.state.checkpoints.set(checkpoint.id, checkpoint);
    s.checkpointIds.push(checkpoint.id);
    return checkpoint;
  }

  /** The checkpoint an operation names, resolved when it runs (it may have been saved by the operation before). */
  resolve(s: SessionRecord, ref: CheckpointRef): CheckpointRecord {
    const checkpoint = this.find(ref, s.owner);
    const model = this.state.resourceOf(s).model.name;
    if (!checkpoint)
      throw new LearnerInputError(`no checkpoint ${'id' in ref ? ref.id : `'${ref.name}' (${ref.type}) on ${ref.resourceId}`}`);
    if (checkpoint.baseModel !== model)
      throw new LearnerInputError(`checkpoint ${checkpoint.name ?? checkpoint.id} was trained on ${checkpoint.baseModel}, not ${model}`);
    return checkpoint;
  }

  /** A learner holding a checkpoint's weights, kept on the session for repeated sampling from it. */
  async pinnedLearner(s: SessionRecord, rt: SessionRuntime, ref: CheckpointRef): Promise<{ learner: TrainerModel; step: number }> {
    const checkpoint = this.resolve(s, ref);
    if (rt.pinned?.checkpointId !== checkpoint.id) {
      const options = learnerOptions(this.state.resourceOf(s).model, { ...s.lora, rank: checkpoint.loraRank });
      const learner = await this.state.models.fromState(options, checkpoint.state, { optimizer: false });
      rt.pinned?.learner.dispose();
      rt.pinned = { checkpointId: checkpoint.id, learner };
    }
    return { learner: rt.pinned.learner, step: checkpoint.step };
  }
}

import type { LearnerState } from '../learner';
import { findModel } from '../models';
import type { CheckpointRecord, OperationRecord, ResourceRecord, SessionRecord } from './records';
import { LIVE_SESSION, learnerOptions, operationKey, type EngineState } from './state';

/** The persisted form of the engine (emulator-state.json): a resource names its model, live sessions carry their learners. */
export interface EngineSnapshot {
  version: 1;
  resources: (Omit<ResourceRecord, 'model'> & { model: string })[];
  sessions: { record: SessionRecord; learner?: LearnerState; generator?: LearnerState }[];
  checkpoints: CheckpointRecord[];
  operations: OperationRecord[];
}

/** Everything needed to come back after a restart: records, learner states of live sessions, checkpoints. */
export function snapshotOf(state: EngineState): EngineSnapshot {
  return {
    version: 1,
    resources: [...state.resources.values()].map((r) => ({ ...r, model: r.model.name })),
    sessions: [...state.sessions.values()].map((s) => {
      const rt = state.runtimes.get(s.id);
      return {
        record: s,
        learner: rt?.learner.exportState({ withOptimizer: true }),
        generator: rt?.generator.exportState({ withOptimizer: false }),
      };
    }),
    checkpoints: [...state.checkpoints.values()],
    operations: [...state.operations.values()].filter((o) => o.status === 'COMPLETED' || o.status === 'FAILED'),
  };
}

/** Loads a snapshot into the state; live sessions get their learners back; only finished operations were kept. */
export async function restoreInto(state: EngineState, snapshot: EngineSnapshot): Promise<void> {
  for (const r of snapshot.resources) {
    const model = findModel(r.model);
    if (model) state.resources.set(r.id, { ...r, model });
  }
  for (const c of snapshot.checkpoints) state.checkpoints.set(c.id, c);
  for (const { record, learner, generator } of snapshot.sessions) {
    state.sessions.set(record.id, record);
    const r = state.resources.get(record.resourceId);
    if (r && learner && generator && LIVE_SESSION.has(record.status)) {
      state.runtimes.set(record.id, {
        learner: await state.models.fromState(learnerOptions(r.model, record.lora), learner, { optimizer: true }),
        generator: await state.models.fromState(learnerOptions(r.model, record.generatorLora ?? record.lora), generator, {
          optimizer: false,
        }),
        queue: [],
        pumping: false,
      });
    }
  }
  for (const op of snapshot.operations) {
    state.operations.set(op.id, op);
    state.operationsByKey.set(operationKey(op.sessionId, op.key), op);
  }
}

import { gpuSeconds } from './resources';
import { ACTIVE_RESOURCE, type EngineState } from './state';
import type { ResourceStatus } from './records';

/**
 * What tests and benchmarks assert on: GPU-seconds billed, optimizer steps applied (and how many of them had no
 * gradient), duplicates absorbed, what is left active, and which checkpoint each session's weights came from.
 */
export interface Ledger {
  resources: {
    id: string;
    dialect: string;
    owner: string;
    ownerTag: string | null;
    baseModel: string;
    status: string;
    /** Why it failed (RESOURCE_UNAVAILABLE, PREEMPTED, CAPACITY_WAIT_TIMEOUT), or null. */
    error: string | null;
    gpuSeconds: number;
    createdAt: string;
  }[];
  sessions: {
    id: string;
    resourceId: string;
    /** The name the client gave it (Roundhouse: the owner tag): who trained on the resource. */
    displayName: string | null;
    status: string;
    /** The trainer's optimizer step counter (it continues from a checkpoint's step on a resume with the optimizer). */
    step: number;
    optimizerSteps: number;
    /** Optimizer steps this session applied with no gradient accumulated since the previous one. */
    emptyOptimizerSteps: number;
    /** Empty steps in the weights the session holds: those of the checkpoint it resumed from, plus its own since. */
    lineageEmptyOptimizerSteps: number;
    /** The checkpoint its weights came from (at creation, or the last in-place load), or null. */
    resumedFromCheckpoint: string | null;
    operationsSubmitted: number;
    duplicatesAbsorbed: number;
    /** Tokens processed (what Tinker bills): prefill (forward-only passes, prompts), sample (generated), train. */
    tokens: { prefill: number; sample: number; train: number };
    /**
     * Sample operations drawn, their sequences, draws that repeated one already made (same request, same weights),
     * and operations drawn at temperature 0.
     */
    sampling: { operations: number; sequences: number; repeated: number; greedy: number };
  }[];
  checkpoints: {
    id: string;
    type: 'training' | 'inference';
    resourceId: string;
    sessionId: string;
    /** The name it was saved under (Baseten: `bt://loops:<resourceId>/weights/<name>`), or null. */
    name: string | null;
    step: number;
    lineageEmptyOptimizerSteps: number;
  }[];
  active: string[];
  totals: {
    gpuSeconds: number;
    optimizerSteps: number;
    emptyOptimizerSteps: number;
    operationsSubmitted: number;
    duplicatesAbsorbed: number;
  };
}

/** The ledger of the state as it stands (time-driven transitions already applied by the caller). */
export function ledgerOf(state: EngineState): Ledger {
  const resources = [...state.resources.values()].map((r) => ({
    id: r.id,
    dialect: r.dialect,
    owner: r.owner,
    ownerTag: r.ownerTag ?? null,
    baseModel: r.model.name,
    status: r.status,
    error: r.error?.code ?? null,
    gpuSeconds: round3(gpuSeconds(r, state.now())),
    createdAt: new Date(r.createdAt).toISOString(),
  }));
  const sessions = [...state.sessions.values()].map((s) => ({
    id: s.id,
    resourceId: s.resourceId,
    displayName: s.displayName ?? null,
    status: s.status,
    step: state.sessionStep(s),
    optimizerSteps: s.optimizerSteps,
    emptyOptimizerSteps: s.emptyOptimizerSteps ?? 0,
    lineageEmptyOptimizerSteps: state.lineageEmptySteps(s),
    resumedFromCheckpoint: s.resumeFromCheckpointId ?? null,
    operationsSubmitted: s.operationsSubmitted,
    duplicatesAbsorbed: s.duplicatesAbsorbed,
    tokens: { prefill: 0, sample: 0, train: 0, ...s.tokens },
    sampling: { operations: 0, sequences: 0, repeated: 0, greedy: 0, ...s.sampling },
  }));
  const checkpoints = [...state.checkpoints.values()].map((c) => ({
    id: c.id,
    type: c.type,
    resourceId: c.resourceId,
    sessionId: c.sessionId,
    name: c.name ?? null,
    step: c.step,
    lineageEmptyOptimizerSteps: c.lineageEmptyOptimizerSteps ?? 0,
  }));
  const sum = (key: 'optimizerSteps' | 'emptyOptimizerSteps' | 'operationsSubmitted' | 'duplicatesAbsorbed') =>
    sessions.reduce((a, s) => a + s[key], 0);
  return {
    resources,
    sessions,
    checkpoints,
    active: resources.filter((r) => ACTIVE_RESOURCE.has(r.status as ResourceStatus)).map((r) => r.id),
    totals: {
      gpuSeconds: round3(resources.reduce((a, r) => a + r.gpuSeconds, 0)),
      optimizerSteps: sum('optimizerSteps'),
      emptyOptimizerSteps: sum('emptyOptimizerSteps'),
      operationsSubmitted: sum('operationsSubmitted'),
      duplicatesAbsorbed: sum('duplicatesAbsorbed'),
    },
  };
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}

import { gpuSeconds } from './resources';
import { ACTIVE_RESOURCE, type EngineState } from './state';
import type { ResourceStatus } from './records';

/** What tests and benchmarks assert on: GPU-seconds billed, optimizer steps applied, duplicates absorbed, what is left active. */
export interface Ledger {
  resources: {
    id: string;
    dialect: string;
    owner: string;
    ownerTag: string | null;
    baseModel: string;
    status: string;
    gpuSeconds: number;
    createdAt: string;
  }[];
  sessions: {
    id: string;
    resourceId: string;
    /** The name the client gave it (Roundhouse: the owner tag): who trained on the resource. */
    displayName: string | null;
    status: string;
    step: number;
    optimizerSteps: number;
    operationsSubmitted: number;
    duplicatesAbsorbed: number;
  }[];
  active: string[];
  totals: { gpuSeconds: number; optimizerSteps: number; operationsSubmitted: number; duplicatesAbsorbed: number };
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
    operationsSubmitted: s.operationsSubmitted,
    duplicatesAbsorbed: s.duplicatesAbsorbed,
  }));
  return {
    resources,
    sessions,
    active: resources.filter((r) => ACTIVE_RESOURCE.has(r.status as ResourceStatus)).map((r) => r.id),
    totals: {
      gpuSeconds: round3(resources.reduce((a, r) => a + r.gpuSeconds, 0)),
      optimizerSteps: sessions.reduce((a, s) => a + s.optimizerSteps, 0),
      operationsSubmitted: sessions.reduce((a, s) => a + s.operationsSubmitted, 0),
      duplicatesAbsorbed: sessions.reduce((a, s) => a + s.duplicatesAbsorbed, 0),
    },
  };
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}

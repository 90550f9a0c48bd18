import { billsTokens, gpuSeconds } from './resources';
import { ACTIVE_RESOURCE, type EngineState } from './state';
import type { ResourceRecord, ResourceStatus, SessionRecord } from './records';

/**
 * What tests and benchmarks assert on: GPU-seconds and dollars billed, optimizer steps applied (and how many of them
 * had no gradient), duplicates absorbed, what is left active, and which checkpoint each session's weights came from.
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
    /** Dollars billed: its GPU-seconds at the model's per-GPU-hour price (0 where the dialect bills tokens). */
    usd: number;
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
    /** Dollars billed: its tokens at the model's prices per million where the dialect bills tokens (Tinker), else 0. */
    usd: number;
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
    /** The resources' dollars and the sessions' (a resource shared by several sessions is billed once, by GPU time). */
    usd: number;
    optimizerSteps: number;
    emptyOptimizerSteps: number;
    operationsSubmitted: number;
    duplicatesAbsorbed: number;
  };
}

/** The ledger of the state as it stands (time-driven transitions already applied by the caller). */
export function ledgerOf(state: EngineState): Ledger {
  const now = state.now();
  const resources = [...state.resources.values()].map((r) => ({
    id: r.id,
    dialect: r.dialect,
    owner: r.owner,
    ownerTag: r.ownerTag ?? null,
    baseModel: r.model.name,
    status: r.status,
    error: r.error?.code ?? null,
    gpuSeconds: round3(gpuSeconds(r, now)),
    usd: gpuTimeUsd(state, r, now),
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
    usd: tokensUsd(state, s),
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
      usd: roundUsd(resources.reduce((a, r) => a + r.usd, 0) + sessions.reduce((a, s) => a + s.usd, 0)),
      optimizerSteps: sum('optimizerSteps'),
      emptyOptimizerSteps: sum('emptyOptimizerSteps'),
      operationsSubmitted: sum('operationsSubmitted'),
      duplicatesAbsorbed: sum('duplicatesAbsorbed'),
    },
  };
}

/** A resource's dollars: its GPU-seconds, as the ledger shows them, at the model's per-GPU-hour price. */
function gpuTimeUsd(state: EngineState, r: ResourceRecord, now: number): number {
  return roundUsd((round3(gpuSeconds(r, now)) / 3600) * state.gpuHourPrice(r.model));
}

/** A session's dollars: its tokens at its model's prices per million where the dialect bills tokens, else 0 (GPU time pays). */
function tokensUsd(state: EngineState, s: SessionRecord): number {
  const r = state.resources.get(s.resourceId);
  if (!r || !s.tokens || !billsTokens(r)) return 0;
  const p = state.tokenPrices(r.model);
  return roundUsd((s.tokens.prefill * p.prefill + s.tokens.sample * p.sample + s.tokens.train * p.train) / 1e6);
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}

/** Dollars to the millionth: what the ledger bills and estimate-cost quotes. */
export function roundUsd(n: number): number {
  return Math.round(n * 1e6) / 1e6;
}

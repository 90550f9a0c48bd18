import { defineSignal } from '@temporalio/workflow';
import type { SweepMetric, SweepValue } from '../../config/rules/sweep';

// What a round knows of the sweep it is an arm of, and what the sweep records: no import of the round's contract, which
// imports this (workflows/sweep/contract.ts has the sweep's input and result).

/** How an arm's round ended (a round's status), or that it still runs. */
export type ArmStatus = 'completed' | 'failed' | 'stopped' | 'cancelled' | 'running';

/** What makes a round an arm of a sweep: its number, and where its rungs are (RoundInput.arm). */
export interface ArmOfSweep {
  arm: number;
  /** Optimizer steps per rung: at each multiple (before the end) the arm reports its eval figure and waits. */
  rungSteps: number;
  metric: SweepMetric;
}

/** An arm as the sweep records it. */
export interface SweepArmRecord {
  arm: number;
  assign: Record<string, SweepValue>;
  workflowId: string;
  status: ArmStatus;
  /** Its eval figure at each rung it reached (step, value). */
  rungs: { rung: number; step: number; value: number }[];
  /** The rung it was stopped at, if successive halving stopped it. */
  stoppedAtRung?: number;
  step: number;
  /** Its final eval figure (trained loss or accuracy), when it completed. */
  final?: number;
  reportPath?: string;
  costUsd?: number;
  gpuMinutes?: number;
}

/** A rung's decision: the figures it was made on, what was kept and stopped. Made once, recorded in the history. */
export interface RungDecisionRecord {
  rung: number;
  step: number;
  figures: { arm: number; value: number }[];
  kept: number[];
  stopped: number[];
}

/** What the sweep recorded: its arms side by side, the decision at each rung, and the winner. */
export interface SweepRecord {
  metric: SweepMetric;
  eta: number;
  rungSteps: number;
  arms: SweepArmRecord[];
  decisions: RungDecisionRecord[];
  winner?: { arm: number; assign: Record<string, SweepValue>; value?: number };
  /** Packed: the trainers the arms shared, and which arms each held. */
  trainers?: { resourceId: string; arms: number[] }[];
}

/** An arm at a rung: its eval figure, told to the sweep (its parent). */
export const armRungSignal = defineSignal<[{ arm: number; rung: number; step: number; value: number }]>('armRung');
/** The sweep's answer at a rung: continue, or stop (successive halving). */
export const armDecisionSignal = defineSignal<[{ rung: number; keep: boolean }]>('armDecision');

import type { CampaignSpec, GateSpec } from '../io/spec';
import type { GateMetric, RoundKind } from './round-kinds';

/**
 * A campaign's stages (SFT, then GRPO, then DPO…): what each runs with, and the gate between one and the next. A
 * spec without `stages` is one stage made of its own blocks. Pure: the campaign workflow decides with these.
 */

/** The spec a stage's rounds run with: the campaign's, with the stage's blocks in place of its own. */
export function stageSpecOf(spec: CampaignSpec, index: number): CampaignSpec {
  const stage = spec.stages?.[index];
  if (!stage) return spec;
  const { data, training, sampling, evaluation, round, rounds } = stage;
  return { ...spec, data, training, sampling, evaluation, round, rounds };
}

/** What a gate reads of a stage's last round (a campaign's round summary). */
export interface GatedRound {
  kind?: RoundKind;
  accuracy?: number;
  meanReward?: number;
  trainedLoss?: number;
}

/** The value of a gate's metric in a round: DPO's accuracy is its preference accuracy. */
export function metricOf(metric: GateMetric, round: GatedRound): number | undefined {
  switch (metric) {
    case 'accuracy':
    case 'preferenceAccuracy':
      return round.accuracy;
    case 'meanReward':
      return round.meanReward;
    case 'evalLoss':
      return round.trainedLoss;
  }
}

export interface GateVerdict {
  metric: GateMetric;
  /** The round's value of the metric (absent when the round did not measure it: the gate fails). */
  value?: number;
  bound: string;
  passed: boolean;
}

/** Whether a stage's last round passed its gate. */
export function gateVerdict(gate: GateSpec, round: GatedRound): GateVerdict {
  const value = metricOf(gate.metric, round);
  const bound = gate.atLeast !== undefined ? `≥ ${gate.atLeast}` : `≤ ${gate.atMost}`;
  const passed =
    value !== undefined && (gate.atLeast !== undefined ? value >= gate.atLeast : gate.atMost !== undefined ? value <= gate.atMost : true);
  return { metric: gate.metric, ...(value !== undefined ? { value } : {}), bound, passed };
}

/** A gate's verdict in words: `accuracy 0.120, needed ≥ 0.3`. */
export function describeVerdict(v: GateVerdict): string {
  return `${v.metric} ${v.value === undefined ? 'not measured' : v.value.toFixed(3)}, needed ${v.bound}`;
}

export { headlineMetric } from './round-kinds';

/** What `status`, `watch`, `summary.md` and `report.html` show of a stage (a campaign's StageProgress). */
export interface ShownStage {
  stage: number;
  name: string;
  kind: RoundKind;
  firstRound: number;
  rounds: number;
  headline: { metric: GateMetric; value?: number };
  gate?: GateVerdict;
  endedBy?: string;
  startedFrom?: string;
  loadOptimizer?: boolean;
  passedOn?: string;
}

const METRIC_NAMES: Record<GateMetric, string> = {
  accuracy: 'accuracy',
  meanReward: 'mean reward',
  preferenceAccuracy: 'preference accuracy',
  evalLoss: 'eval loss',
};

/** A stage's facts in words, the same in every view: `round 1`, `accuracy 62.0%`, `passed (…)`, checkpoints. */
export function stageFacts(s: ShownStage): {
  label: string;
  rounds: string;
  headline: string;
  gate?: string;
  /** A checkpoint id, or absent: the base model. */
  startedFrom?: string;
  /** What of the previous stage's checkpoint a later stage loaded: `weights`, or `weights and optimizer state`. */
  carried?: string;
  passedOn?: string;
} {
  const { metric, value } = s.headline;
  const shown =
    value === undefined
      ? '–'
      : metric === 'accuracy' || metric === 'preferenceAccuracy'
        ? `${(value * 100).toFixed(1)}%`
        : value.toFixed(3);
  const last = s.firstRound + s.rounds - 1;
  return {
    label: `${s.stage} ${s.name}`,
    rounds: s.rounds === 0 ? 'no round finished yet' : s.rounds === 1 ? `round ${s.firstRound}` : `rounds ${s.firstRound}–${last}`,
    headline: `${METRIC_NAMES[metric]} ${shown}`,
    ...(s.gate ? { gate: `${s.gate.passed ? 'passed' : 'missed'} (${describeVerdict(s.gate)})` } : {}),
    ...(s.startedFrom ? { startedFrom: s.startedFrom } : {}),
    // Stages after the first start from the previous stage's weights, and its optimizer state where they say so.
    ...(s.stage > 1 && s.startedFrom ? { carried: s.loadOptimizer ? 'weights and optimizer state' : 'weights' } : {}),
    ...(s.passedOn ? { passedOn: s.passedOn } : {}),
  };
}

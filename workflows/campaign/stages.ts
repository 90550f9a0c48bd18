import type { CampaignSpec } from '../../config/io/spec';
import { describeVerdict, gateVerdict, headlineMetric, metricOf, stageSpecOf } from '../../config/rules/stages';
import type { CampaignCarriedState, RoundSummary, StageProgress, StageRecord } from './contract';
import type { RoundInput } from '../round/contract';

/**
 * A staged campaign's stages (`stages:`), as the campaign carries them: one record per stage started, the running one
 * last. Each stage runs its own rounds (its kind, data and `rounds.max`/target) and ends with its gate's verdict and the
 * checkpoint it passes on to the next. A campaign without stages has none: every method answers as if for one stage.
 */
export class CampaignStages {
  constructor(
    private readonly spec: CampaignSpec,
    private readonly carried: CampaignCarriedState,
  ) {}

  /** A new campaign's stages: the first one, starting at round 1 (from `rounds.startFrom`, if given). */
  static started(spec: CampaignSpec): Pick<CampaignCarriedState, 'stages'> {
    return spec.stages ? { stages: [stageRecord(spec, 0, 1, spec.rounds.startFrom?.checkpointId)] } : {};
  }

  /** The rounds a campaign may run: a staged campaign's stages' together (each stage's own target ends that stage). */
  static maxRounds(spec: CampaignSpec): number {
    return spec.stages ? spec.stages.reduce((a, s) => a + s.rounds.max, 0) : spec.rounds.max;
  }

  /** The running stage's record (none without stages). */
  get current(): StageRecord | undefined {
    return this.carried.stages?.at(-1);
  }

  /** The spec the running stage's rounds run with (a campaign without stages: its own). */
  runningSpec(): CampaignSpec {
    const stage = this.current;
    return stage ? stageSpecOf(this.spec, stage.stage - 1) : this.spec;
  }

  /** What a round's summary says of its stage: its number and round kind. */
  roundFields(): Pick<RoundSummary, 'stage' | 'kind'> {
    const stages = this.carried.stages;
    return stages ? { stage: stages.length, kind: this.runningSpec().round.kind } : {};
  }

  /** Why no further round starts because of the stages: a gate not passed, or the last stage done. */
  reasonToStop(): string | undefined {
    const stage = this.current;
    if (stage?.gate && !stage.gate.passed)
      return `stage ${stage.stage} (${stage.name}) did not pass its gate: ${describeVerdict(stage.gate)}`;
    if (stage?.endedBy && stage.stage === this.spec.stages!.length)
      return `all ${stage.stage} stages done: stage ${stage.stage} (${stage.name}) ${stage.endedBy}`;
    return undefined;
  }

  /**
   * Whether the round just run ended its stage (the stage's rounds.max or target) and, if so, its gate's verdict and
   * the checkpoint it passes on, recorded in the stage's record.
   */
  noteRoundEnd(last: RoundSummary): void {
    const record = this.current;
    if (!record || last.status !== 'completed') return;
    const { rounds, gate } = this.spec.stages![record.stage - 1]!;
    const done = this.carried.rounds.length - record.firstRound + 1;
    if (rounds.target && last.accuracy !== undefined && last.accuracy >= rounds.target.atLeast)
      record.endedBy = `target reached: accuracy ${last.accuracy.toFixed(3)} ≥ ${rounds.target.atLeast}`;
    else if (done >= rounds.max) record.endedBy = `rounds.max (${rounds.max}) reached`;
    else return;
    if (last.trainingCheckpointId) record.passedOn = last.trainingCheckpointId;
    if (gate) record.gate = gateVerdict(gate, last);
  }

  /**
   * If the running stage ended, the next one starts: on its own data, from the checkpoint this one passed on.
   * Returns whether it did (the next round's data is then chosen).
   */
  startNext(): boolean {
    const stage = this.current;
    if (!stage?.endedBy) return false;
    const next = stageRecord(this.spec, stage.stage, this.carried.rounds.length + 1, stage.passedOn);
    this.carried.stages!.push(next);
    this.carried.nextTrain = { path: this.spec.stages![next.stage - 1]!.data.train };
    return true;
  }

  /**
   * Where a staged campaign's round starts: the last round's training checkpoint after the stage's first round (when
   * it continues from checkpoints), else the checkpoint the previous stage passed on (weights, and the optimizer state
   * if the stage says `loadOptimizer`), or the campaign's start for the first stage. Without stages: `unstaged`.
   */
  startOf(round: number, unstaged: () => RoundInput['startFrom']): RoundInput['startFrom'] {
    const { carried: state } = this;
    const spec = this.runningSpec();
    const stage = this.current;
    if (!stage) return unstaged();
    if (round > stage.firstRound && spec.rounds.continueFrom === 'checkpoint' && state.lastCheckpointId)
      return { checkpointId: state.lastCheckpointId, loadOptimizer: true };
    if (stage.stage === 1) return spec.rounds.startFrom;
    return stage.startedFrom ? { checkpointId: stage.startedFrom, loadOptimizer: stage.loadOptimizer ?? false } : undefined;
  }

  /** The checkpoints the stages start from or pass on: retention never deletes them. */
  checkpointIds(): (string | undefined)[] {
    return (this.carried.stages ?? []).flatMap((s) => [s.startedFrom, s.passedOn]);
  }

  /** The last stage's gate was not passed: the campaign failed. */
  gateMissed(): boolean {
    return this.current?.gate?.passed === false;
  }

  /** The stages as shown (none without stages). */
  progress(): Pick<{ stages?: StageProgress[] }, 'stages'> {
    return this.carried.stages ? { stages: this.carried.stages.map((s) => this.stageProgress(s)) } : {};
  }

  /** A stage as shown: its rounds so far and the latest value of the metric that matters for its kind. */
  private stageProgress(record: StageRecord): StageProgress {
    const rounds = this.carried.rounds.filter((r) => r.stage === record.stage);
    const metric = headlineMetric(record.kind);
    const measured = rounds.filter((r) => r.status === 'completed' && metricOf(metric, r) !== undefined).at(-1);
    const value = measured ? metricOf(metric, measured) : undefined;
    return { ...record, rounds: rounds.length, headline: { metric, ...(value !== undefined ? { value } : {}) } };
  }
}

/** The record of a stage as it starts (`index` 0-based). */
function stageRecord(spec: CampaignSpec, index: number, firstRound: number, startedFrom: string | undefined): StageRecord {
  const stage = spec.stages![index]!;
  return {
    stage: index + 1,
    name: stage.name,
    kind: stage.round.kind,
    firstRound,
    ...(startedFrom ? { startedFrom } : {}),
    ...(index > 0 ? { loadOptimizer: stage.loadOptimizer } : {}),
  };
}

import type { AbilityFlag, Dialect } from './dialects';
import { DEFAULT_GRPO_AGGREGATION, type GrpoAggregation, type StepLoss } from './loss-units';

/**
 * The round kinds, one descriptor each: everything that differs by kind outside the workflow's own steps
 * (workflows/round/kinds.ts) and the kind's segment activity reads it here. Adding a kind is one entry in
 * `DESCRIPTORS`; every `Record<RoundKind, …>` and exhaustive switch then fails to compile until it handles the kind
 * (docs/round-kinds.md). Pure: workflows read it.
 */

/** The metrics a stage's gate can read of its stage's last round (in this order in messages). */
export const GATE_METRIC_NAMES = [
  /** The share of held-out rows whose sampled answer scored right. */
  'accuracy',
  /** The mean reward of the last trained step's samples. */
  'meanReward',
  /** The share of held-out pairs whose chosen answer the trained policy prefers more than the reference does. */
  'preferenceAccuracy',
  /** The held-out loss after training (DPO: the preference loss). */
  'evalLoss',
] as const;
export type GateMetric = (typeof GATE_METRIC_NAMES)[number];

/** The dialect abilities a kind can need (the yes/no ones of config/rules/dialects.ts). */
export type NeededAbility = AbilityFlag;

/** A training step's forward-backward: its sequences, and how the spec's fields make them. */
export interface StepBatch {
  sequences: number;
  /** e.g. `training.batchSize × round.grpo.groupSize: 8 × 64` */
  from: string;
}

/** The parts of a round's spec the trainer's shape reads (a campaign's, a stage's or a round's spec satisfies it). */
export interface TrainerShapeSpec {
  provider: { generatorReplicas?: number };
  training: { batchSize: number };
  evaluation: { sampleAnswers?: boolean };
  round?: { kind: RoundKind; grpo?: { groupSize: number } };
}

/** The parts of a campaign's spec the kinds' checks read (config/io/spec-blocks.ts runs them). */
export interface KindCheckedSpec {
  provider: { kind: Dialect };
  data: { test?: string };
  sampling: { temperature: number };
  training: { accumulate?: number };
  evaluation: { sampleAnswers?: boolean; sampleEvery?: number; sampling?: object; every?: number };
  rounds: { max: number; target?: unknown; nextData: { policy: string } };
  promotion?: object;
  round: {
    kind: RoundKind;
    grpo?: {
      reward?: { kind: string; pattern?: string };
      environment?: object;
      loss: {
        kind?: 'builtin' | 'python';
        name?: string;
        taskQueue?: string;
        type: string;
        beta: number;
        clipLow?: number;
        clipHigh?: number;
        aggregation?: string;
        ratio?: string;
        allowUnclippedOffPolicy?: boolean;
      };
      maxStepsOffPolicy: number;
      reference?: string;
    };
    dpo?: object;
    custom?: object;
  };
}

/** A spec problem: the field's path and what is wrong with it. */
export type KindProblem = (path: (string | number)[], message: string) => void;

/** What the round options of the spec say of the step's loss. */
export interface LossOptions {
  grpo?: { loss: { kind?: 'builtin' | 'python'; type: 'grpo' | 'ppo' | 'importance_sampling'; aggregation?: GrpoAggregation } };
}

/** The options blocks round kinds have (`round.grpo`, `round.dpo`, `round.custom`). */
export type KindOptions = 'grpo' | 'dpo' | 'custom';

/** A round's summary figures, as its report file has them (for the campaign summary's per-kind line). */
export interface SummaryFigures {
  round: number;
  accuracy?: number | null;
  first_reward?: number | null;
  latest_reward?: number | null;
  baseline_margin?: number | null;
  trained_margin?: number | null;
}

export interface RoundKindDescriptor {
  /** A round of the kind in a message: `an sft round`. */
  aRound: string;
  /**
   * What a dataset row is: `rows` (prompt → answer), `pairs` (prompt, chosen, rejected), or `completions` (a prompt
   * and its named completions: an answer, a chosen/rejected pair, or a `completions` map, with any other fields).
   */
  data: 'rows' | 'pairs' | 'completions';
  /**
   * Where the kind samples from the policy: `to-train` (its steps train on samples), `answers` (only the evaluation's
   * answers, which `evaluation.sampleAnswers: false` turns off), `never` (forward passes only).
   */
  samples: 'to-train' | 'answers' | 'never';
  /** The kind's own options block in the spec (`round.<options>`), if it has one. */
  options?: KindOptions;
  /** The metric that matters for the kind: what `status` and the reports show of a stage. */
  headline: GateMetric;
  /** What a gate can read of the kind's rounds (in GATE_METRIC_NAMES order). */
  gateMetrics: readonly GateMetric[];
  /** A step's loss, from the round's options (its unit: config/rules/loss-units.ts). */
  stepLoss(options: LossOptions | undefined): StepLoss;
  /** What the report's baseline and trained loss are (`loss_unit`). */
  evalLoss: string;
  /** The activity that trains one segment of the kind's steps. */
  segmentActivity: 'trainSegment' | 'trainGrpoSegment' | 'trainDpoSegment' | 'trainCustomSegment';
  /** The step record's fields the tracker logs (MLflow key → field), after the loss and learning rate. */
  trackedSteps: Readonly<Record<string, 'meanReward' | 'margin' | 'accuracy'>>;
  /** The tracker's key for an evaluation's metric during training. */
  trackedEvalMetric: 'eval/metric' | 'eval/preference_accuracy';
  /** The dialect abilities the kind needs, and what it does with each (the message when a dialect has not). */
  needs: Partial<Record<NeededAbility, string>>;
  /** Why a round of the kind samples on its trainer's generator; undefined when it never does. */
  generatorNeed(spec: TrainerShapeSpec): string | undefined;
  stepBatch(spec: TrainerShapeSpec): StepBatch;
  /** The kind's own checks of the spec, each naming the field; `stop` when the rest of the checks would only echo. */
  specProblems(spec: KindCheckedSpec, problem: KindProblem): 'stop' | void;
  /** The campaign summary's line of a round of the kind, if it has one. */
  summaryLine?(r: SummaryFigures, show: { number(v?: number | null): string; percent(v?: number | null): string }): string | undefined;
}

const SFT = {
  aRound: 'an sft round',
  data: 'rows',
  samples: 'answers',
  headline: 'accuracy',
  gateMetrics: ['accuracy', 'evalLoss'],
  stepLoss: () => ({ type: 'cross_entropy' }),
  evalLoss: 'mean cross-entropy per trained (answer) token of the eval set, in nats',
  segmentActivity: 'trainSegment',
  trackedSteps: {},
  trackedEvalMetric: 'eval/metric',
  needs: {},
  generatorNeed: (spec) =>
    spec.evaluation.sampleAnswers === false
      ? undefined
      : 'an sft round samples an answer for every eval row after training (evaluation.sampleAnswers: false measures eval loss only)',
  stepBatch: (spec) => ({ sequences: spec.training.batchSize, from: `training.batchSize: ${spec.training.batchSize}` }),
  specProblems: () => undefined,
} satisfies RoundKindDescriptor;

const GRPO = {
  aRound: 'a grpo round',
  data: 'rows',
  samples: 'to-train',
  options: 'grpo',
  headline: 'meanReward',
  gateMetrics: ['accuracy', 'meanReward', 'evalLoss'],
  stepLoss: (options) => {
    const loss = options?.grpo?.loss ?? { type: 'grpo' };
    if (loss.kind === 'python') return { type: 'custom' };
    // Always an aggregation: the unit of the loss figure must not rest on the provider's undocumented default.
    return loss.type === 'grpo' ? { type: 'grpo', aggregation: loss.aggregation ?? DEFAULT_GRPO_AGGREGATION } : { type: loss.type };
  },
  evalLoss: 'mean cross-entropy per trained (answer) token of the eval set, in nats',
  segmentActivity: 'trainGrpoSegment',
  trackedSteps: { 'train/mean_reward': 'meanReward' },
  trackedEvalMetric: 'eval/metric',
  needs: {},
  generatorNeed: () => 'a grpo round samples the groups it trains on',
  stepBatch: (spec) => {
    const group = spec.round?.grpo?.groupSize ?? 4;
    return {
      sequences: spec.training.batchSize * group,
      from: `training.batchSize × round.grpo.groupSize: ${spec.training.batchSize} × ${group}`,
    };
  },
  specProblems: grpoProblems,
  summaryLine: (r, show) =>
    typeof r.first_reward === 'number'
      ? `- round ${r.round} (grpo): mean reward ${show.number(r.first_reward)} at its first step → ${show.number(r.latest_reward)} at its last`
      : undefined,
} satisfies RoundKindDescriptor;

const DPO = {
  aRound: 'a dpo round',
  data: 'pairs',
  samples: 'never',
  options: 'dpo',
  headline: 'preferenceAccuracy',
  gateMetrics: ['preferenceAccuracy', 'evalLoss'],
  stepLoss: () => ({ type: 'dpo' }),
  evalLoss: 'mean DPO loss (−log σ(β·margin)) over the eval pairs',
  segmentActivity: 'trainDpoSegment',
  trackedSteps: { 'train/dpo_margin': 'margin', 'train/preference_accuracy': 'accuracy' },
  trackedEvalMetric: 'eval/preference_accuracy',
  needs: { customLoss: 'trains through a custom loss (custom_forward_backward)' },
  // Reference and policy logprobs are forward passes; nothing is sampled.
  generatorNeed: () => undefined,
  stepBatch: (spec) => ({
    sequences: 2 * spec.training.batchSize,
    from: `training.batchSize × 2 (each pair is its chosen and its rejected sequence): ${spec.training.batchSize} × 2`,
  }),
  specProblems: dpoProblems,
  summaryLine: (r, show) =>
    typeof r.trained_margin === 'number'
      ? `- round ${r.round} (dpo): eval preference margin ${show.number(r.baseline_margin)} → ${show.number(r.trained_margin)} nats, preference accuracy ${show.percent(r.accuracy)}`
      : undefined,
} satisfies RoundKindDescriptor;

const CUSTOM = {
  aRound: 'a custom round',
  data: 'completions',
  samples: 'answers',
  options: 'custom',
  headline: 'evalLoss',
  gateMetrics: ['accuracy', 'evalLoss'],
  stepLoss: () => ({ type: 'custom' }),
  evalLoss: "the loss function's own loss on the eval set (forward only), as it returns it",
  segmentActivity: 'trainCustomSegment',
  trackedSteps: {},
  trackedEvalMetric: 'eval/metric',
  needs: { customLoss: 'trains through a custom loss (forward, your function, custom_forward_backward)' },
  // Sampled answers are opt-in: the rows may have none (pairs, named completions).
  generatorNeed: (spec) =>
    spec.evaluation.sampleAnswers === true
      ? 'a custom round with evaluation.sampleAnswers: true samples an answer for every eval row after training'
      : undefined,
  stepBatch: (spec) => ({
    sequences: spec.training.batchSize,
    from: `training.batchSize: ${spec.training.batchSize} rows (each row's completions are checked with the data)`,
  }),
  specProblems: customProblems,
} satisfies RoundKindDescriptor;

const DESCRIPTORS = { sft: SFT, grpo: GRPO, dpo: DPO, custom: CUSTOM } as const satisfies Record<string, RoundKindDescriptor>;

export type RoundKind = keyof typeof DESCRIPTORS;
/** Every round kind, in the table's order (the spec's enum, messages, summaries). */
export const ROUND_KINDS = Object.keys(DESCRIPTORS) as [RoundKind, ...RoundKind[]];
/** A spec that names no kind trains an sft round (the spec's default). */
export const DEFAULT_ROUND_KIND: RoundKind = 'sft';
/** The descriptors by kind. */
export const ROUND_KIND: Readonly<Record<RoundKind, RoundKindDescriptor>> = DESCRIPTORS;

/** The name of a kind's segment activity, as its literal type (the workflow calls it by that name). */
export function segmentActivityOf<K extends RoundKind>(kind: K): (typeof DESCRIPTORS)[K]['segmentActivity'] {
  return DESCRIPTORS[kind].segmentActivity;
}

/** Every kind's segment activity (what `watch` and the tests look for among a round's running activities). */
export const SEGMENT_ACTIVITIES: readonly string[] = ROUND_KINDS.map((k) => ROUND_KIND[k].segmentActivity);

/** The kind a spec's round trains. */
export function kindOf(spec: { round?: { kind: RoundKind } }): RoundKind {
  return spec.round?.kind ?? DEFAULT_ROUND_KIND;
}

/** The descriptor of a spec's round. */
export function descriptorOf(spec: { round?: { kind: RoundKind } }): RoundKindDescriptor {
  return ROUND_KIND[kindOf(spec)];
}

/** A kind's options block (`round.grpo`, `round.dpo`) when the round's kind is the one that reads it. */
export function optionsOf<O extends KindOptions, R extends { kind: RoundKind } & Partial<Record<O, unknown>>>(
  round: R | undefined,
  options: O,
): R[O] | undefined {
  return round && ROUND_KIND[round.kind].options === options ? round[options] : undefined;
}

/** The metric that matters for a round kind, as `status` and the reports show a stage: accuracy, reward, preference. */
export function headlineMetric(kind: RoundKind): GateMetric {
  return ROUND_KIND[kind].headline;
}

/** `an sft round`, `a grpo round`: a kind's round in a message. */
export function aRoundOf(kind: RoundKind): string {
  return ROUND_KIND[kind].aRound;
}

/** GRPO's checks: a reward (or an environment), a sampling temperature above 0, a policy loss its options agree with. */
function grpoProblems(spec: KindCheckedSpec, problem: KindProblem): 'stop' | void {
  const { grpo } = spec.round;
  if (!grpo) {
    problem(['round', 'grpo'], 'is required when round.kind is grpo: at least a reward, e.g. grpo: { reward: { kind: numeric } }');
    return 'stop';
  }
  if (!grpo.reward && !grpo.environment)
    problem(['round', 'grpo', 'reward'], 'is required (or round.grpo.environment, whose episodes give the rewards)');
  if (grpo.reward && grpo.environment)
    problem(['round', 'grpo', 'reward'], "is not used with round.grpo.environment: the environment's rubric gives the rewards; remove one");
  if (grpo.reward?.kind === 'regex' && !grpo.reward.pattern)
    problem(['round', 'grpo', 'reward', 'pattern'], 'is required when the reward kind is regex');
  if (spec.sampling.temperature === 0)
    problem(
      ['sampling', 'temperature'],
      'must be above 0 for a grpo round: a group of greedy completions is all alike and teaches nothing',
    );
  if (grpo.loss.kind === 'python') return pythonPolicyLossProblems(grpo.loss, problem);
  if (grpo.loss.name !== undefined || grpo.loss.taskQueue !== undefined)
    problem(
      ['round', 'grpo', 'loss', grpo.loss.name !== undefined ? 'name' : 'taskQueue'],
      'is for a python loss: set kind: python, or remove it',
    );
  if (grpo.loss.beta > 0 && grpo.loss.type !== 'grpo')
    problem(['round', 'grpo', 'loss', 'beta'], `the KL penalty is part of the grpo loss, not ${grpo.loss.type}`);
  if (grpo.loss.beta > 0 && !grpo.reference) {
    problem(
      ['round', 'grpo', 'loss', 'beta'],
      'is above 0 but no reference logprobs are configured: set round.grpo.reference: start (or beta: 0)',
    );
  }
  if (grpo.maxStepsOffPolicy > 0 && grpo.loss.type === 'importance_sampling' && !grpo.loss.allowUnclippedOffPolicy) {
    problem(
      ['round', 'grpo', 'loss', 'type'],
      `importance_sampling is unclipped, and round.grpo.maxStepsOffPolicy is ${grpo.maxStepsOffPolicy}: off-policy, an unclipped ratio lets the sampler and trainer drift apart (KL growing ~30× and entropy collapsing have been reported at 3 steps); use ppo (a clipped ratio), maxStepsOffPolicy: 0, or set loss.allowUnclippedOffPolicy: true`,
    );
  }
  if (spec.evaluation.sampleAnswers === false)
    problem(['evaluation', 'sampleAnswers'], 'false is for sft rounds (this one is grpo): a grpo round samples to train');
  if (spec.training.accumulate !== undefined && spec.training.accumulate > 1)
    problem(
      ['training', 'accumulate'],
      "is for sft, dpo and custom rounds: a grpo step's batch is its sampled groups (training.batchSize × round.grpo.groupSize); make those smaller instead",
    );
}

/** DPO's checks: nothing that needs sampled answers, which a dpo round has none of. */
function dpoProblems(spec: KindCheckedSpec, problem: KindProblem): void {
  if (spec.promotion)
    problem(
      ['promotion'],
      "compares sampled-answer accuracy (sft and grpo rounds); a dpo round has none (a staged campaign puts its last stage's best round forward: end it with an sft or grpo stage)",
    );
  const { sampleAnswers, sampleEvery } = spec.evaluation;
  if (sampleAnswers === true)
    problem(['evaluation', 'sampleAnswers'], 'is for sft rounds: a dpo round measures preference accuracy, and samples nothing');
  if (sampleAnswers === false)
    problem(['evaluation', 'sampleAnswers'], 'false is for sft rounds (this one is dpo): a dpo round samples nothing anyway');
  if (sampleEvery !== undefined)
    problem(
      ['evaluation', 'sampleEvery'],
      'is for sampled answers, which a dpo round has none of (its evaluations measure preference accuracy anyway)',
    );
  if (spec.evaluation.sampling)
    problem(['evaluation', 'sampling'], 'is for sampled answers, which a dpo round has none of (it measures preference accuracy)');
  if (spec.rounds.max > 1 && spec.rounds.nextData.policy === 'mistakes') {
    problem(['rounds', 'nextData', 'policy'], 'mistakes needs sampled answers to score, which a dpo round has none of: use all or static');
  }
}

/**
 * A custom round's checks: its loss block, and that whatever needs sampled answers has them (they are opt-in:
 * `evaluation.sampleAnswers: true`, on rows with answers).
 */
function customProblems(spec: KindCheckedSpec, problem: KindProblem): 'stop' | void {
  if (!spec.round.custom) {
    problem(
      ['round', 'custom'],
      'is required when round.kind is custom: the loss, e.g. custom: { loss: { kind: python, name: simpo, taskQueue: losses } }',
    );
    return 'stop';
  }
  if (spec.evaluation.every !== undefined)
    problem(
      ['evaluation', 'every'],
      "is not supported for custom rounds yet: the loss function's eval loss is measured before and after training",
    );
  if (spec.evaluation.sampleAnswers === true) return;
  const needs = (path: string[], what: string) =>
    problem(path, `${what}; a custom round samples answers only with evaluation.sampleAnswers: true (on rows with answers)`);
  if (spec.data.test) needs(['data', 'test'], 'is scored by sampled answers');
  if (spec.evaluation.sampleEvery !== undefined) needs(['evaluation', 'sampleEvery'], 'samples the eval set during training');
  if (spec.evaluation.sampling) needs(['evaluation', 'sampling'], 'is for sampled answers');
  if (spec.rounds.target) needs(['rounds', 'target'], 'is an accuracy, measured from sampled answers');
  const policy = spec.rounds.nextData.policy;
  if (spec.rounds.max > 1 && (policy === 'mistakes' || policy === 'python'))
    needs(['rounds', 'nextData', 'policy'], `${policy} chooses the next round's rows by the pool's sampled answers`);
  if (spec.promotion) needs(['promotion'], 'compares the accuracy of sampled answers');
}

/** A GRPO round's python loss: named on a task queue, and none of the built-in losses' knobs (the function has its own). */
function pythonPolicyLossProblems(loss: NonNullable<KindCheckedSpec['round']['grpo']>['loss'], problem: KindProblem): void {
  const at = (field: string) => ['round', 'grpo', 'loss', field];
  if (!loss.name) problem(at('name'), 'is required for a python loss: the name it is registered under (@roundhouse.loss)');
  if (!loss.taskQueue) problem(at('taskQueue'), 'is required for a python loss: the task queue its Python worker polls');
  const builtIn = (['clipLow', 'clipHigh', 'aggregation', 'ratio', 'allowUnclippedOffPolicy'] as const).find((f) => loss[f] !== undefined);
  if (builtIn) problem(at(builtIn), 'is a setting of the built-in losses; a python loss computes its own');
  if (loss.beta > 0)
    problem(
      at('beta'),
      "is the built-in grpo loss's KL penalty; a python loss computes its own (round.grpo.reference gives it the reference logprobs)",
    );
}

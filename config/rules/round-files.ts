/**
 * Every file a round leaves beside its report, named in one place. The names are what campaigns have always written
 * (old campaigns stay readable), including the two ways a rollback's lineage shows in a name:
 * - `.L<n>` after the name (round files, step and evaluation records, a scorer's batches): `lineageSuffix`;
 * - `L<n>-` before the step (a Python reward's or environment's batch and gateway files): `lineagePrefix`.
 * Neither is there for a round's first lineage (the names rounds had before rollbacks existed).
 */

/** `.L<n>` after a file's name: none for the first lineage. */
export function lineageSuffix(lineage: number | undefined): string {
  return lineage ? `.L${lineage}` : '';
}

/** `L<n>-` before a step's name in a Python call's batch and gateway files: none for the first lineage. */
export function lineagePrefix(lineage: number | undefined): string {
  return lineage ? `L${lineage}-` : '';
}

const padded = (step: number) => String(step).padStart(7, '0');

/** A step's name in per-step files and folders: `s0000012`. */
export function stepName(step: number): string {
  return `s${padded(step)}`;
}

/** How a folder and a name are joined: `dir/name` in workflows; activities pass the store's `joinLocation`. */
export type JoinLocation = (dir: string, ...names: string[]) => string;

const slash: JoinLocation = (dir, ...names) => [dir, ...names].join('/');

/** Files and folders of round `round` beside its report in `dir`: `round-N.json`, `round-N.<what>`. */
export function roundFiles(dir: string, round: number, join: JoinLocation = slash) {
  const beside = (what: string) => join(dir, `round-${round}.${what}`);
  return {
    /** The round's report. */
    report: beside('json'),
    /** Step records (`steps` below), evaluation records and the tracking cursor. */
    steps: beside('steps'),
    /** The final weights' sampled (or, DPO, measured) eval set. */
    evaluations: beside('evaluations.json'),
    /** The final weights on the next round's pool (`rounds.nextData`). */
    poolEvaluations: beside('pool-evaluations.json'),
    /** The final weights on `data.test`. */
    testEvaluations: beside('test-evaluations.json'),
    /** An evaluation during training that sampled, at `step` under `lineage`. */
    evaluationsAt: (step: number, lineage?: number) => beside(`evaluations-s${step}${lineageSuffix(lineage)}.json`),
    /** DPO: the reference logprobs of every pair, computed once before training. */
    referenceLogprobs: beside('reference-logprobs.json'),
    /** GRPO: each step's samples (`samplesFile`), a folder per lineage. */
    samples: (lineage?: number) => beside(`samples${lineageSuffix(lineage)}`),
    /** GRPO with a Python reward: its batches and per-sample records, kept across lineages. */
    rewards: beside('rewards'),
    /** GRPO with an environment: its episodes' batches, gateways and turn records, kept across lineages. */
    episodes: beside('episodes'),
    /** A custom round: each step's loss batch and its recorded result (loss, gradients, metrics), and the evaluations'. */
    losses: beside('losses'),
    /** `rounds.nextData: python`: the rows the policy wrote for this round. */
    pythonData: beside('python.jsonl'),
    /** `rounds.nextData`: this round's training set, when the policy chose rows. */
    trainData: beside('train.jsonl'),
  };
}

export type RoundFiles = ReturnType<typeof roundFiles>;

/** Inside a round's `steps` folder. */
export const stepsFolder = {
  /** One segment write of step records, named by its first step. */
  records: (stepsDir: string, firstStep: number, lineage: number | undefined, join: JoinLocation) =>
    join(stepsDir, `steps-${padded(firstStep)}${lineageSuffix(lineage)}.json`),
  /** Which files are step records. */
  isRecords: (location: string) => /\/steps-[^/]*\.json$/.test(location),
  /** An evaluation during training's point. */
  evaluation: (stepsDir: string, step: number, lineage: number | undefined, join: JoinLocation) =>
    join(stepsDir, `eval-${padded(step)}${lineageSuffix(lineage)}.json`),
  /** How far the experiment tracker has logged. */
  trackingCursor: (stepsDir: string, join: JoinLocation) => join(stepsDir, 'tracked.json'),
};

/** GRPO's samples of one step in a `samples` folder. */
export function samplesFile(samplesDir: string, step: number, join: JoinLocation): string {
  return join(samplesDir, `${stepName(step)}.json`);
}

/** A Python reward's or environment's files for one step (in `rewards` or `episodes`). */
export const pythonStepFiles = {
  /** The items sent in one call. */
  batch: (dir: string, step: number, lineage: number | undefined, join: JoinLocation) =>
    join(dir, 'batches', `${lineagePrefix(lineage)}${stepName(step)}.json`),
  /** An environment's gateway access (URL and token per episode). */
  gateway: (dir: string, step: number, lineage: number | undefined, join: JoinLocation) =>
    join(dir, 'gateways', `${lineagePrefix(lineage)}${stepName(step)}.json`),
  /** An environment's turn records of one step, a folder per episode. */
  records: (dir: string, step: number, join: JoinLocation) => join(dir, stepName(step)),
};

/** A Python scorer's files: in `scores` beside the evaluations it scores, one batch per pass. */
export const scoreFiles = {
  folder: (evaluationsPath: string, join: JoinLocation) => join(evaluationsPath.slice(0, evaluationsPath.lastIndexOf('/')), 'scores'),
  /** A pass's name in its batch file and item keys: `eval`, `eval.L2`. */
  pass: (label: string, lineage: number | undefined) => `${label}${lineageSuffix(lineage)}`,
  batch: (scoresDir: string, pass: string, join: JoinLocation) => join(scoresDir, 'batches', `${pass}.json`),
};

/**
 * A custom round's loss calls in its `losses` folder: a training step's batch and record (the step's identity: its
 * lineage and step), and an evaluation's (its label: `baseline`, `trained`).
 */
export const lossFiles = {
  stepBatch: (dir: string, step: number, lineage: number | undefined, join: JoinLocation) =>
    join(dir, 'batches', `${lineagePrefix(lineage)}${stepName(step)}.json`),
  stepRecord: (dir: string, step: number, lineage: number | undefined, join: JoinLocation) =>
    join(dir, `${lineagePrefix(lineage)}${stepName(step)}.json`),
  evalBatch: (dir: string, label: string, lineage: number | undefined, join: JoinLocation) =>
    join(dir, 'batches', `eval-${label}${lineageSuffix(lineage)}.json`),
  evalRecord: (dir: string, label: string, lineage: number | undefined, join: JoinLocation) =>
    join(dir, `eval-${label}${lineageSuffix(lineage)}.json`),
};

import type { PythonCall, PythonRole } from '../../config/rules/python-calls';

/**
 * The wire between the TypeScript workflows and a Python worker (python/src/roundhouse/activities.py): activity
 * names and payloads (snake_case keys: the Python side's dataclasses). Completions never travel here: requests name
 * store locations, and results are numbers.
 */

export interface DescribeRequest {
  /** `args`: an environment's, which a verifiers environment is loaded with. */
  functions: { role: PythonRole; name: string; args?: Record<string, unknown> }[];
}

export interface DescribeResult {
  /** `field`: where under the function's spec block the problem is, `name` or `args` (absent from older workers: `name`). */
  functions: { role: PythonRole; name: string; ok: boolean; problem?: string | null; signature?: string | null; field?: string }[];
  registered: Record<PythonRole, string[]>;
  worker: string;
  python: string;
  roundhouse: string;
  /** roundhouse.sandbox.isolation(): "bubblewrap", "namespaces", "rlimits-unsafe", or "refused: <why>". */
  sandbox: string;
}

/** `items`: the location of `{"items": ScoreItem[]}`; each result is recorded at `<records>/<key>.json`. */
export interface ScoreRequest {
  function: string;
  items: string;
  records: string;
  concurrency: number;
}

export interface ScoreItem {
  /** The sample's identity under `records` (e.g. `s0000003/p2-c1`): its result is recorded there once. */
  key: string;
  completion: string;
  answer: string;
  prompt: string;
  row: Record<string, unknown>;
  /** Where the sample is, for the failure's message: step, prompt, sample, line. */
  context: Record<string, number | string>;
}

export interface ScoreResult {
  /** Per item: the score, or null when the function returned `roundhouse.unscorable(reason)`. */
  values: (number | null)[];
  computed: number;
  reused: number;
  unscorable: number;
  unscorable_reasons?: string[];
}

export interface NextDataRequest {
  function: string;
  pool: string;
  results: string | null;
  output: string;
  round: number;
}

export interface NextDataResult {
  rows: number;
  reused: boolean;
}

/**
 * A step's episodes: `items` is the location of `{"items": EpisodeItem[]}`; each episode finds its gateway URL and
 * token in `gateway` (rewritten when the TypeScript worker's attempt changes), and its result is recorded at
 * `<records>/<key>.json`.
 */
export interface EpisodesRequest {
  /** `verifiers:<module>` or a function registered with `@roundhouse.environment`. */
  environment: string;
  args: Record<string, unknown>;
  items: string;
  records: string;
  gateway: string;
  model: string;
  concurrency: number;
}

export interface EpisodeItem {
  key: string;
  /** The chat the episode starts from. */
  prompt: { role: string; content: string }[];
  answer: string;
  row: Record<string, unknown>;
  context: Record<string, number | string>;
}

export interface EpisodesResult {
  /** Per item: the episode's reward, or null when the environment said it is unscorable. */
  rewards: (number | null)[];
  /** Per item: the ids of its turns (the gateway's records), in the order the episode made them. */
  turns: string[][];
  computed: number;
  reused: number;
  unscorable: number;
}

/** The input of `pythonCallWorkflow`: one activity on the Python worker's task queue. */
/**
 * A loss call (`roundhouse.loss`): `batch` is the location of the batch (activities/python.ts `LossBatch`), and the
 * function's result is recorded at `record` (train mode: with the gradients the segment sends).
 */
export interface LossRequest {
  function: string;
  batch: string;
  record: string;
  mode: 'train' | 'eval';
}

export interface PythonCallInput {
  call: PythonCall;
  role: PythonRole;
  activity: 'roundhouse.rewards' | 'roundhouse.scores' | 'roundhouse.next_data' | 'roundhouse.episodes' | 'roundhouse.loss';
  request: ScoreRequest | NextDataRequest | EpisodesRequest | LossRequest;
}

import type { CampaignSpec } from '../io/spec';
import { PYTHON_CALL_DEFAULTS } from './python-defaults';
import { optionsOf } from './round-kinds';

export { PYTHON_CALL_DEFAULTS } from './python-defaults';

/**
 * Calls of the user's functions on a Python worker (python/): which functions a spec names, with what retries and
 * bounds, and how a call's failure is named. Pure and workflow-safe: the workflows check and call them, the
 * activities call them, the spec's schema takes its defaults from here.
 */

export type PythonRole = 'reward' | 'scorer' | 'data_policy' | 'environment' | 'loss';

/** A call of one registered function: where it is served and how it is retried (the spec's fields, defaults filled). */
export interface PythonCall {
  name: string;
  taskQueue: string;
  retry: { maxAttempts: number; initialIntervalSeconds: number; maxIntervalSeconds: number; backoff: number };
  timeoutSeconds: number;
  heartbeatTimeoutSeconds: number;
  workerWaitSeconds: number;
  concurrency: number;
}

/** A function the round (or campaign) will call, and the spec field that names it (for errors). */
export interface PythonCheck {
  field: string;
  role: PythonRole;
  call: PythonCall;
  /** An environment's `args`: the Python worker loads a verifiers environment with them to check it. */
  args?: Record<string, unknown>;
}

/** The Python worker's activities, by name (python/src/roundhouse/activities.py). */
export const PYTHON_ACTIVITIES = {
  describe: 'roundhouse.describe',
  rewards: 'roundhouse.rewards',
  scores: 'roundhouse.scores',
  nextData: 'roundhouse.next_data',
  episodes: 'roundhouse.episodes',
  loss: 'roundhouse.loss',
} as const;

/** A spec block naming a python function (some fields optional): the call, with the defaults filled in. */
export function pythonCallOf(spec: Partial<PythonCall> & { name: string; taskQueue: string }): PythonCall {
  const d = PYTHON_CALL_DEFAULTS;
  return {
    name: spec.name,
    taskQueue: spec.taskQueue,
    retry: { ...d.retry, ...spec.retry },
    timeoutSeconds: spec.timeoutSeconds ?? d.timeoutSeconds,
    heartbeatTimeoutSeconds: spec.heartbeatTimeoutSeconds ?? d.heartbeatTimeoutSeconds,
    workerWaitSeconds: spec.workerWaitSeconds ?? d.workerWaitSeconds,
    concurrency: spec.concurrency ?? d.concurrency,
  };
}

/** The call a `policy: python` next-data spec makes. */
export function nextDataCall(nextData: CampaignSpec['rounds']['nextData']): PythonCall | undefined {
  if (nextData.policy !== 'python' || !nextData.name || !nextData.taskQueue) return undefined;
  return pythonCallOf({ ...nextData, name: nextData.name, taskQueue: nextData.taskQueue });
}

/** The round's reward, when it is a python one. */
export function pythonReward(spec: { round?: CampaignSpec['round'] }): PythonCall | undefined {
  const reward = optionsOf(spec.round, 'grpo')?.reward;
  return reward?.kind === 'python' ? pythonCallOf(reward) : undefined;
}

/**
 * The round's multi-turn environment, as a call: a `python` one by its registered name, a `verifiers` one as
 * `verifiers:<module>` (the Python worker loads the module's `load_environment`).
 */
export function pythonEnvironment(spec: { round?: CampaignSpec['round'] }): PythonCall | undefined {
  const environment = optionsOf(spec.round, 'grpo')?.environment;
  if (!environment) return undefined;
  return pythonCallOf({ ...environment, name: environmentName(environment) });
}

/** How the Python worker knows an environment: `verifiers:<module>`, or the registered function's name. */
export function environmentName(environment: { kind: 'verifiers' | 'python'; name: string }): string {
  return environment.kind === 'verifiers' ? `verifiers:${environment.name}` : environment.name;
}

/** The round's loss function: a custom round's, or a GRPO round's python loss. */
export function pythonLoss(spec: { round?: CampaignSpec['round'] }): PythonCall | undefined {
  const custom = optionsOf(spec.round, 'custom')?.loss;
  if (custom) return pythonCallOf(custom);
  const grpo = optionsOf(spec.round, 'grpo')?.loss;
  return grpo?.kind === 'python' && grpo.name && grpo.taskQueue
    ? pythonCallOf({ ...grpo, name: grpo.name, taskQueue: grpo.taskQueue })
    : undefined;
}

/** The evaluation's scorer, when it is a python one. */
export function pythonScorer(spec: Pick<CampaignSpec, 'evaluation'>): PythonCall | undefined {
  const scorer = spec.evaluation.scorer;
  return typeof scorer === 'object' ? pythonCallOf(scorer) : undefined;
}

/** The Python functions a round calls: its reward and its scorer, when they are python ones. */
export function pythonChecksOf(spec: { round?: CampaignSpec['round']; evaluation: CampaignSpec['evaluation'] }): PythonCheck[] {
  const reward = pythonReward(spec);
  const scorer = pythonScorer(spec);
  const environment = pythonEnvironment(spec);
  const args = optionsOf(spec.round, 'grpo')?.environment?.args;
  const loss = pythonLoss(spec);
  return [
    ...(loss
      ? [{ field: optionsOf(spec.round, 'custom') ? 'round.custom.loss' : 'round.grpo.loss', role: 'loss' as const, call: loss }]
      : []),
    ...(reward ? [{ field: 'round.grpo.reward', role: 'reward' as const, call: reward }] : []),
    ...(environment
      ? [{ field: 'round.grpo.environment', role: 'environment' as const, call: environment, ...(args ? { args } : {}) }]
      : []),
    ...(scorer ? [{ field: 'evaluation.scorer', role: 'scorer' as const, call: scorer }] : []),
  ];
}

/** The failure type a role's call ends with past its retries. */
export function pythonFailureType(
  role: PythonRole,
): 'RewardFailed' | 'ScorerFailed' | 'DataPolicyFailed' | 'EnvironmentFailed' | 'LossFailed' {
  if (role === 'environment') return 'EnvironmentFailed';
  if (role === 'loss') return 'LossFailed';
  return role === 'reward' ? 'RewardFailed' : role === 'scorer' ? 'ScorerFailed' : 'DataPolicyFailed';
}

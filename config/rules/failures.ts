/**
 * Every failure type a round or a campaign can end with: the closed set that reports, `status` and Temporal
 * failures name. Activities throw `RoundhouseFailure` (or a provider/config/data error, mapped at the activity
 * boundary in activities/failures.ts); workflows read the type back with `failureTypeOf` (workflows/failures.ts).
 * Pure: no Temporal import, so activities, workflows and the CLI can all name these.
 */
export const FAILURE_TYPES = {
  InvalidInput: 'the spec, the data or the tokenizer is wrong; found before provisioning, never retried',
  NonFiniteLoss: 'the trainer computed a NaN or infinite loss; the same step would again, so the round fails',
  ProviderRejected: 'the provider refused a request as wrong (4xx, INVALID_INPUT, UNSUPPORTED); never retried',
  ProviderUnavailable: 'a transient provider failure (429, 5xx, network, a retryable operation error); retried',
  NeedsReconcile: "a provider call's outcome is unknown; never retried blindly",
  OperationFailed:
    'a provider operation failed (INTERNAL_ERROR, TIMEOUT, RESOURCE_EXHAUSTED): the round rolls back to its last checkpoint under new keys',
  TrainerLost:
    'the trainer died, was preempted, or its session ended: the round reopens a session (on a new trainer if need be) from its last checkpoint',
  CapacityUnavailable:
    'the provider had no GPUs for the trainer within advanced.provisionTimeoutMinutes (creates retried meanwhile); nothing left active',
  ProvisionUnconfirmed: 'a trainer create got no answer and listing found no new trainer yet; retried',
  SessionUnconfirmed: 'a session open got no answer and listing found no new session yet; retried',
  StepCounterMismatch: "the trainer's step counter is not where the round's cursor says; never trained over",
  ReferenceLogprobsMissing: 'a DPO round lost its reference logprobs after training began; cannot compute its loss',
  EmptySamples: 'the generators returned only empty completions for a GRPO step',
  RewardFailed:
    "the user's reward function (on a Python worker) raised past the spec's retry policy, or returned what is not a reward; never scored 0",
  ScorerFailed: "the user's scorer (on a Python worker) raised past the spec's retry policy, or returned what is not a score",
  DataPolicyFailed: "the user's next-data policy (on a Python worker) raised past the spec's retry policy, or returned no rows",
  EnvironmentFailed:
    "the user's environment (on a Python worker) raised past the spec's retry policy, hit an infrastructure error, or returned what is not a reward; never scored 0",
  LossFailed:
    "the user's loss function (on a Python worker) raised past the spec's retry policy, or returned a non-finite loss or gradients of the wrong shape (never sent to the trainer)",
  BudgetReached:
    'the next unit of work would have taken the spend past budget.maxUsd: it was not issued, and the round stopped (status stopped, not failed)',
  PythonWorkerUnavailable: 'no Python worker polled the task queue the spec names within its workerWaitSeconds',
  WorkerEnvironmentMissing:
    "a variable the spec names (notify.webhookEnv, notify.secretEnv) is not set on the worker; found before the campaign's first round",
  Cancelled: 'the round or campaign was cancelled (stop now, or its parent closed)',
  Unknown: 'a failure outside this set (a bug): the message says what',
} as const;

export type FailureType = keyof typeof FAILURE_TYPES;

export function isFailureType(type: string | undefined): type is FailureType {
  return type !== undefined && Object.prototype.hasOwnProperty.call(FAILURE_TYPES, type);
}

/** Failure types Temporal retries (with the activity's retry policy); every other type fails the activity at once. */
const RETRYABLE: ReadonlySet<FailureType> = new Set(['ProviderUnavailable', 'ProvisionUnconfirmed', 'SessionUnconfirmed']);

export function isRetryableFailure(type: FailureType): boolean {
  return RETRYABLE.has(type);
}

/** Failure types a round recovers from by rolling back (bounded by `advanced.maxRecoveries`); not retried in place. */
const RECOVERABLE: ReadonlySet<string> = new Set<FailureType>(['OperationFailed', 'TrainerLost']);

export function isRecoverableFailure(type: string | undefined): boolean {
  return type !== undefined && RECOVERABLE.has(type);
}

/** A domain failure thrown by activities; mapped to a Temporal failure of the same type at the activity boundary. */
export class RoundhouseFailure extends Error {
  constructor(
    readonly type: FailureType,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'RoundhouseFailure';
  }
}

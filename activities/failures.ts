import { ApplicationFailure, Context } from '@temporalio/activity';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import { ConfigError, DataValidationError } from '../config/rules/errors';
import { isRetryableFailure, RoundhouseFailure, type FailureType } from '../config/rules/failures';
import { maskSecrets, maskSecretsIn } from '../config/io/secrets';
import { TokenizerNotFoundError } from '../config/io/tokenizer';
import { ProviderError } from '../providers/errors';
import { recordProviderError } from './metrics';

/**
 * Where errors are caught (the contract): helpers and providers throw domain errors (`RoundhouseFailure`,
 * `ProviderError`, `DataValidationError`, `ConfigError`); every activity body runs in `atBoundary`, the one place
 * they become Temporal failures whose `type` is one of config/failures.ts's closed set; workflows catch only activity
 * failures and read their type (workflows/failures.ts). The round's workflow catches everything on purpose:
 * releasing the GPU matters more than retrying a stuck workflow task. Whatever an activity sends to Temporal (its
 * failure's message, stack, cause and details; its heartbeat details; its result) has every secret masked first
 * (`maskingInterceptors`, installed on every worker): an error that quotes a request quotes its credentials.
 */
export function toActivityFailure(err: unknown, details: Record<string, unknown> = {}): unknown {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof RoundhouseFailure) return failure(err.type, err.message, { ...details, ...err.details });
  if (err instanceof DataValidationError || err instanceof ConfigError || err instanceof TokenizerNotFoundError) {
    return failure('InvalidInput', err.message, details);
  }
  if (err instanceof ProviderError) {
    recordProviderError(err.errorClass, err.code);
    const detail = { ...details, code: err.providerCode ?? err.code, status: err.status, operationId: err.operationId };
    const retryAfterMs = err.errorClass === 'retryable' && err.retryAfterMs !== undefined ? Math.max(err.retryAfterMs, 100) : undefined;
    return failure(providerFailureType(err), err.message, detail, retryAfterMs);
  }
  return err;
}

/** A provider error's place in the closed set, by its class and, for rejections, its code. */
export function providerFailureType(err: ProviderError): FailureType {
  // A failed operation keeps its failed record under its key: only a rollback under new keys runs the work again.
  if (err.code.startsWith('OPERATION_FAILED_') && err.errorClass === 'retryable') return 'OperationFailed';
  if (err.providerCode === 'SESSION_NOT_ACTIVE') return 'TrainerLost';
  if (err.errorClass === 'retryable') return 'ProviderUnavailable';
  if (err.errorClass === 'needs-reconcile') return 'NeedsReconcile';
  return err.providerCode === 'NON_FINITE_LOSS' ? 'NonFiniteLoss' : 'ProviderRejected';
}

function failure(type: FailureType, message: string, details: Record<string, unknown>, nextRetryDelay?: number): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: !isRetryableFailure(type), details: [details], nextRetryDelay });
}

/** Runs an activity body, translating errors at the boundary. */
export async function atBoundary<T>(body: () => Promise<T>, details?: () => Record<string, unknown>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    throw toActivityFailure(err, details?.());
  }
}

/**
 * Runs an activity body that records no heartbeat details of its own while heartbeating every second, so that its
 * proxy's heartbeat timeout notices a dead worker in seconds instead of the start-to-close timeout (minutes).
 */
export async function keepingAlive<T>(body: () => Promise<T>): Promise<T> {
  const context = Context.current();
  context.heartbeat();
  const timer = setInterval(() => context.heartbeat(), 1000);
  try {
    return await body();
  } finally {
    clearInterval(timer);
  }
}

/** An error about to become a Temporal failure, with every secret masked in its message, stack, details and causes. */
export function maskedForTemporal(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error) || depth > 8) return err;
  err.message = maskSecrets(err.message);
  if (err.stack) err.stack = maskSecrets(err.stack);
  if (err instanceof ApplicationFailure && err.details) (err as { details: unknown[] }).details = err.details.map((d) => maskSecretsIn(d));
  if (err.cause !== undefined) maskedForTemporal(err.cause, depth + 1);
  return err;
}

/**
 * The worker's activity interceptors: every activity's result, heartbeat details and failure leave the process with
 * secrets masked (the SDK offers no outbound hook for heartbeats, so the context's `heartbeat` is wrapped).
 */
export const maskingInterceptors: ActivityInterceptorsFactory = (context) => {
  const heartbeat = context.heartbeat;
  Object.defineProperty(context, 'heartbeat', { value: (details?: unknown) => heartbeat(maskSecretsIn(details)) });
  return {
    inbound: {
      async execute(input, next) {
        try {
          return maskSecretsIn(await next(input));
        } catch (err) {
          throw maskedForTemporal(err);
        }
      },
    },
  };
};

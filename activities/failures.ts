import { ApplicationFailure } from '@temporalio/activity';
import { ConfigError } from '../config/errors';
import { TokenizerNotFoundError } from '../config/tokenizer';
import { ProviderError } from '../providers/errors';
import { DataValidationError } from './data';
import { recordProviderError } from './metrics';

/**
 * The one place provider and input errors become Temporal failures. The failure `type` is what workflows and
 * reports see as the error type.
 * - bad input (spec, data, tokenizer): non-retryable `InvalidInput`
 * - provider `non-retryable`: non-retryable, typed by the provider's code (e.g. `NON_FINITE_LOSS`)
 * - provider `retryable`: retried by Temporal, after the provider's `retry-after` when it gave one
 * - provider `needs-reconcile`: non-retryable `NeedsReconcile:<code>`; the caller must look before acting
 */
export function toActivityFailure(err: unknown, details: Record<string, unknown> = {}): unknown {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof DataValidationError || err instanceof ConfigError || err instanceof TokenizerNotFoundError) {
    return ApplicationFailure.create({ type: 'InvalidInput', message: err.message, nonRetryable: true, details: [details] });
  }
  if (err instanceof ProviderError) {
    recordProviderError(err.errorClass, err.code);
    const type = err.providerCode && /^[A-Z_]+$/.test(err.providerCode) ? err.providerCode : err.code;
    const detail = { ...details, code: err.code, status: err.status, operationId: err.operationId };
    if (err.errorClass === 'retryable') {
      return ApplicationFailure.create({
        type,
        message: err.message,
        nonRetryable: false,
        details: [detail],
        nextRetryDelay: err.retryAfterMs !== undefined ? Math.max(err.retryAfterMs, 100) : undefined,
      });
    }
    if (err.errorClass === 'needs-reconcile') {
      return ApplicationFailure.create({ type: `NeedsReconcile:${type}`, message: err.message, nonRetryable: true, details: [detail] });
    }
    return ApplicationFailure.create({ type, message: err.message, nonRetryable: true, details: [detail] });
  }
  return err;
}

/** Runs an activity body, translating errors at the boundary. */
export async function atBoundary<T>(body: () => Promise<T>, details?: () => Record<string, unknown>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    throw toActivityFailure(err, details?.());
  }
}

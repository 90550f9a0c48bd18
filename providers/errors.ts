import { failedForCapacity, type TrainerResource } from './types';
/**
 * One error taxonomy for every provider call:
 * - `retryable`: nothing was applied, or resending is safe (same idempotency key); try again after a delay.
 * - `non-retryable`: the request itself is wrong (bad input, auth, not found, non-finite loss); retrying cannot help.
 * - `needs-reconcile`: the outcome is unknown (a create whose response was lost, a session that is gone);
 *   look at the provider's state (list, get) before doing anything else. Never blindly retry.
 * Activities map these onto Temporal failures in one place.
 */
export type ProviderErrorClass = 'retryable' | 'non-retryable' | 'needs-reconcile';

export interface ProviderErrorDetails {
  status?: number;
  /** The provider's own code (an operation error code, an HTTP error body code). */
  providerCode?: string;
  retryAfterMs?: number;
  operationId?: string;
  method?: string;
  path?: string;
  cause?: unknown;
}

export class ProviderError extends Error {
  readonly status?: number;
  readonly providerCode?: string;
  readonly retryAfterMs?: number;
  readonly operationId?: string;
  readonly method?: string;
  readonly path?: string;

  constructor(
    readonly code: string,
    readonly errorClass: ProviderErrorClass,
    message: string,
    details: ProviderErrorDetails = {},
  ) {
    super(message, details.cause !== undefined ? { cause: details.cause } : undefined);
    this.name = 'ProviderError';
    this.status = details.status;
    this.providerCode = details.providerCode;
    this.retryAfterMs = details.retryAfterMs;
    this.operationId = details.operationId;
    this.method = details.method;
    this.path = details.path;
  }
}

export function isProviderError(err: unknown): err is ProviderError {
  return err instanceof ProviderError;
}

/** Operation-level failure codes (dialect-neutral) and what they mean for the caller. */
export function classifyOperationError(code: string): ProviderErrorClass {
  switch (code) {
    case 'RESOURCE_EXHAUSTED':
    case 'TIMEOUT':
    case 'INTERNAL_ERROR':
    case 'UNSPECIFIED':
      return 'retryable'; // not applied; only a new key would run it again (the old one returns this failed record)
    case 'SESSION_NOT_ACTIVE':
      return 'needs-reconcile'; // the session (or its resource) is gone: reopen from a checkpoint
    default:
      return 'non-retryable'; // INVALID_INPUT, NON_FINITE_LOSS, ...
  }
}

/**
 * A resource that failed or stopped while the caller waited for it to be ready: NO_CAPACITY (with the provider's
 * code) when it failed for want of capacity, RESOURCE_NOT_READY otherwise. Non-retryable as such: the resource is
 * gone; whether to create another is the caller's decision.
 */
export function notReady(resource: TrainerResource, what: string): ProviderError {
  const code = failedForCapacity(resource) ? 'NO_CAPACITY' : 'RESOURCE_NOT_READY';
  return new ProviderError(code, 'non-retryable', `${what}${resource.error ? `: ${resource.error}` : ''}`, {
    providerCode: resource.errorCode,
  });
}

import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ProviderError } from '../errors';
import { errorBody, poll } from '../http';
import type { AwaitOptions, OperationHandle, OperationKind } from '../types';
import type { TinkerApi } from './auth';
import { operationFailure } from './failures';

/** What this process knows of a model it drives: Tinker runs a model's operations in `seq_id` order, and only its driver knows the order. */
export interface ModelState {
  id: string;
  /** The Tinker session it was made in (its id, the server's, says nothing of it on every server). */
  tinkerSession: string;
  displayName?: string;
  baseModel: string;
  /** The next `seq_id` to send (0 is the model's create). */
  nextSeq: number;
  /** The trainer's step when the model was made (a checkpoint's, with its optimizer), and optim steps submitted since. */
  baseStep: number;
  submittedSteps: number;
  /** Optim steps submitted and not seen to settle, and those that failed (they applied nothing): request id → the step it was sent as. */
  pendingOptims: Map<string, number>;
  failedOptims: Map<string, number>;
  /** Caller keys → the seq they were sent under and what was sent: a resubmission is the same operation. */
  keys: Map<string, { seq: number; fingerprint: string; handle?: OperationHandle<unknown> }>;
  /** A submit whose seq the service may not have: later operations would wait behind the gap, so none is sent. */
  gap?: { key: string; seq: number };
  /** The sampling session samples go to, and the step of its weights. */
  sampler?: { id: string; version: number; nextSeq: number };
  closed?: boolean;
  /** An operation failed because the model is gone (the service lost it): it takes no more. */
  failed?: boolean;
  /** `unload_model` answered: nothing of it is left to release. */
  unloaded?: boolean;
  /** Sent as `ttl_seconds` on every save; unset, the saves never expire. */
  checkpointTtlSeconds?: number;
}

/** A save's `ttl_seconds`, where the session was opened with one (the service's default is never to expire). */
export function checkpointTtl(m: ModelState): { ttl_seconds?: number } {
  return m.checkpointTtlSeconds !== undefined ? { ttl_seconds: m.checkpointTtlSeconds } : {};
}

/** The handle of a save found already made (its 409): `listed:<tinker path>`, settled from the checkpoint listing. */
export const LISTED = 'listed:';
export const Future = z.object({ request_id: z.string(), model_id: z.string().nullish() }).passthrough();
export const MadeModel = z.object({ model_id: z.string().nullish() }).passthrough();

/**
 * Long-polls `retrieve_future` until the future settles: 408 (or a `try_again` body) means still running. A failure
 * is an `{error, category}` body (hosted Tinker) or HTTP 400 `{"detail": …}` (SkyRL; a 500 there is retried by the
 * HTTP helper, then fails as retryable), the server's text kept and classified (failures.ts).
 */
export async function retrieve(
  api: TinkerApi,
  requestId: string,
  type: string,
  options: AwaitOptions,
): Promise<{ json?: unknown; bytes?: Buffer }> {
  return poll(
    async () => {
      const answer = await api.callRaw({
        method: 'POST',
        path: '/api/v1/retrieve_future',
        body: { request_id: requestId, allow_metadata_only: false },
        replaySafe: true,
        passStatuses: [400, 408],
        headers: { 'x-tinker-request-type': type },
        signal: options.signal,
      });
      if (answer.status === 408) return undefined;
      if (answer.status === 400) {
        const text = answer.bytes.toString('utf8');
        const { message } = errorBody(text);
        if (message) throw operationFailure(requestId, message, { status: 400 });
        throw new ProviderError('HTTP_400', 'non-retryable', `POST /api/v1/retrieve_future: HTTP 400 (no body)`, { status: 400 });
      }
      if (/application\/x-protobuf/i.test(answer.contentType)) return { bytes: answer.bytes };
      const json = JSON.parse(answer.bytes.toString('utf8') || '{}') as Record<string, unknown>;
      if (json.type === 'try_again') return undefined;
      if (typeof json.error === 'string')
        throw operationFailure(requestId, json.error, { category: typeof json.category === 'string' ? json.category : 'unknown' });
      return { json };
    },
    `Tinker future ${requestId}`,
    { initialIntervalMs: 0, maxIntervalMs: 0, timeoutMs: options.timeoutMs ?? 3_600_000, signal: options.signal },
  );
}

/**
 * Sends one operation of a model under the next seq_id (or, for a key sent before, under its own): a resubmission
 * is the same operation, the same key with another body is refused, and a send that may have failed leaves a gap
 * no other operation may be sent behind.
 */
export async function sequenced<T>(
  /** Whoever drives the model (the only one that knows its order): `TinkerModels`. */
  driver: { driven(sessionId: string): ModelState },
  kind: OperationKind,
  sessionId: string,
  key: string,
  fingerprint: string,
  send: (seq: number, m: ModelState) => Promise<{ request_id: string }>,
  describe: (requestId: string, m: ModelState) => string,
): Promise<OperationHandle<T>> {
  const m = driver.driven(sessionId);
  const known = m.keys.get(key);
  if (known && known.fingerprint !== fingerprint)
    throw new ProviderError('IDEMPOTENCY_KEY_REUSED', 'non-retryable', `key ${key} was sent with a different body`, {
      providerCode: 'IDEMPOTENCY_KEY_REUSED',
    });
  if (known?.handle) return known.handle as OperationHandle<T>;
  if (m.gap && m.gap.key !== key)
    throw new ProviderError(
      'SESSION_NOT_ACTIVE',
      'needs-reconcile',
      `Tinker model ${sessionId}: operation ${m.gap.seq} (${m.gap.key}) may not have reached the service, and later ones would wait behind it; reopen from a checkpoint`,
      { providerCode: 'SESSION_NOT_ACTIVE' },
    );
  const seq = known?.seq ?? m.nextSeq++;
  const entry = known ?? { seq, fingerprint };
  m.keys.set(key, entry);
  let future: { request_id: string };
  try {
    future = await send(seq, m);
  } catch (err) {
    m.gap = { key, seq };
    throw err;
  }
  if (m.gap?.key === key) m.gap = undefined;
  const handle: OperationHandle<T> = { kind, sessionId, operationId: describe(future.request_id, m), idempotencyKey: key };
  entry.handle = handle;
  if (m.keys.size > 4096) m.keys.delete(m.keys.keys().next().value!); // old keys are not resent
  return handle;
}

/** The trainer's step once every optim step submitted has applied (those known to have failed applied nothing). */
export function nextStep(m: ModelState): number {
  return m.baseStep + m.submittedSteps - m.failedOptims.size;
}

/** The trainer's step the optim steps seen to settle reached. */
export function appliedStep(m: ModelState): number {
  return m.baseStep + m.submittedSteps - m.pendingOptims.size - m.failedOptims.size;
}

export function fingerprintOf(op: string, body: unknown): string {
  return createHash('sha256')
    .update(`${op}\n${JSON.stringify(body)}`)
    .digest('hex');
}

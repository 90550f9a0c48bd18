import { classifyOperationError, ProviderError } from '../errors';
import { HttpClient, poll, type HttpClientOptions } from '../http';
import type { AwaitOptions } from '../types';
import type { LoopsControlPlane } from './control';
import { AcceptedWire, AnyJson, OperationWire, PolicyVersionWire, operationErrorCode, type RunWire } from './wire';

/**
 * `Authorization: Api-Key <key>` on every plane, as `baseten-loops` 0.32.0 sends it (`_headers.py`
 * `request_headers`); the API also accepts `Bearer`, the scheme its docs show (WIRE.md §1.3).
 */
export const AUTH_SCHEME = 'Api-Key';

/** How the data planes are reached: the HTTP settings of every plane, and operation polling between long polls. */
export interface LoopsPlaneOptions extends Omit<HttpClientOptions, 'baseUrl' | 'authHeader' | 'authScheme'> {
  /** First interval and ceiling. */
  pollIntervalMs?: number;
  maxPollIntervalMs?: number;
}

/** What every data-plane request of a run carries. */
export function runHeaders(runId: string): Record<string, string> {
  return { 'x-run-id': runId, 'x-baseten-accept-error': '1' };
}

/**
 * A run's data planes, at the URLs the control plane gives: its trainer (202 + long-poll operations under an
 * `Idempotency-Key`, health, policy version) and its paired sampler. An answer of "not here" after the run ended
 * is read as the session gone (reconcile), not as a passing error.
 */
export class LoopsDataPlanes {
  private readonly clients = new Map<string, HttpClient>();
  private readonly pollIntervalMs: number;
  private readonly maxPollIntervalMs: number;

  constructor(
    private readonly options: LoopsPlaneOptions,
    private readonly control: LoopsControlPlane,
  ) {
    this.pollIntervalMs = options.pollIntervalMs ?? 100;
    this.maxPollIntervalMs = options.maxPollIntervalMs ?? 2_000;
  }

  /** The run's trainer. */
  trainer(run: RunWire): HttpClient {
    if (!run.base_url) throw new ProviderError('RUN_NOT_READY', 'retryable', `run ${run.id} has no trainer URL yet`);
    return this.at(run.base_url);
  }

  /** The client of a data plane's URL (a trainer's, a sampler's): one per URL. */
  at(baseUrl: string): HttpClient {
    let client = this.clients.get(baseUrl);
    if (!client) {
      client = new HttpClient({
        ...this.options,
        baseUrl,
        authScheme: AUTH_SCHEME,
        userAgent: this.options.userAgent ?? 'roundhouse-baseten',
      });
      this.clients.set(baseUrl, client);
    }
    return client;
  }

  /** The trainer answers its health probe (what the SDK waits for before its first operation). */
  async healthy(runId: string): Promise<boolean> {
    const run = await this.control.runInfo(runId);
    try {
      await this.trainer(run).request({
        method: 'GET',
        path: '/health',
        query: { base_model: run.base_model },
        headers: runHeaders(runId),
        schema: AnyJson,
      });
      return true;
    } catch (err) {
      if (err instanceof ProviderError && err.errorClass !== 'non-retryable') return false;
      throw err;
    }
  }

  /** The trainer's optimizer step (restored by `load_state_with_optimizer`). */
  async policyVersion(runId: string): Promise<number> {
    const run = await this.control.runInfo(runId);
    const res = await this.trainer(run).request({
      method: 'GET',
      path: '/policy_version',
      headers: runHeaders(runId),
      schema: PolicyVersionWire,
    });
    return res.policy_version;
  }

  /** POST `/<route>` → 202 `{operation_id}`; the operation id is the key sent, so a resubmission names the same operation. */
  async submit(runId: string, route: string, key: string, body: Record<string, unknown>): Promise<string> {
    const run = await this.control.runInfo(runId);
    try {
      const res = await this.trainer(run).request({
        method: 'POST',
        path: `/${route}`,
        idempotencyKey: key,
        body: { ...body, run_id: run.id, model: run.base_model },
        headers: runHeaders(run.id),
        schema: AcceptedWire,
      });
      return res.operation_id;
    } catch (err) {
      throw await this.dataPlaneError(run.id, err);
    }
  }

  /** Long-polls `GET /operations/{id}`: the trainer holds it until done, and a 408 just means "ask again". */
  async settle(runId: string, operationId: string, options: AwaitOptions): Promise<unknown> {
    const run = await this.control.runInfo(runId);
    const op = await poll(
      async () => {
        try {
          const o = await this.trainer(run).request({
            method: 'GET',
            path: `/operations/${encodeURIComponent(operationId)}`,
            headers: runHeaders(runId),
            schema: OperationWire,
            signal: options.signal,
          });
          return o.status === 'done' || o.status === 'error' ? o : undefined;
        } catch (err) {
          if (err instanceof ProviderError && err.status === 408) return undefined;
          throw await this.dataPlaneError(runId, err, operationId);
        }
      },
      `operation ${operationId} on run ${runId}`,
      {
        initialIntervalMs: this.pollIntervalMs,
        maxIntervalMs: this.maxPollIntervalMs,
        timeoutMs: options.timeoutMs ?? 3_600_000,
        signal: options.signal,
      },
    );
    if (op.status === 'error') {
      const code = operationErrorCode(op);
      const message = typeof op.error === 'string' ? op.error : JSON.stringify(op.error);
      throw new ProviderError(
        `OPERATION_FAILED_${code}`,
        classifyOperationError(code),
        `operation ${operationId} on run ${runId} failed: ${code} (${op.error_class ?? 'error'}): ${message}`,
        {
          providerCode: code,
          operationId,
        },
      );
    }
    return op.result;
  }

  /** A trainer or sampler that answers "not here" after its run ended means the session is gone: reconcile. */
  async dataPlaneError(runId: string, err: unknown, operationId?: string): Promise<unknown> {
    if (!(err instanceof ProviderError) || ![404, 410, 503].includes(err.status ?? 0)) return err;
    const run = await this.control.fetchRun(runId).catch(() => undefined);
    if (!run || run.status.name !== 'ACTIVE') {
      return new ProviderError('SESSION_NOT_ACTIVE', 'needs-reconcile', `run ${runId} is ${run ? 'inactive' : 'gone'}: ${err.message}`, {
        providerCode: 'SESSION_NOT_ACTIVE',
        status: err.status,
        cause: err,
      });
    }
    if (err.status === 404 && operationId) {
      // The trainer has no record of it (never submitted, or evicted): resubmitting under the same key is safe.
      return new ProviderError(
        'OPERATION_UNKNOWN',
        'retryable',
        `run ${runId} has no operation ${operationId}; resubmit it with the same key`,
        { status: 404, operationId, cause: err },
      );
    }
    return err;
  }

  async close(): Promise<void> {
    await Promise.all([...this.clients.values()].map((c) => c.close()));
    this.clients.clear();
  }
}

import { z } from 'zod';
import { OPERATION_ERROR_CODES } from './engine/records';
import { seededRandom } from './random';

/**
 * Fault injection. Each rule fires with probability `rate` on matching requests (or operations), at most `max`
 * times, from a PRNG seeded by `seed`, so a run replays identically.
 * - `http-429`, `http-500`, `http-503`: answered before the request is handled (nothing applied).
 * - `reset`: the connection is destroyed before the request is handled (nothing applied).
 * - `lose-response`: the request is handled (work applied), then the connection is destroyed instead of answering.
 * - `fail-operation`: a submitted operation completes as FAILED with `errorCode` (its work is not applied).
 * - `resource-error`: the resource of a matching operation dies (ERROR) instead of running it; billing stops.
 * - `preempt`: the same, as a reclaimed spot GPU (Baseten: deployment PREEMPTED; Together: as `resource-error`).
 * - `session-expire`, `session-error`: the session of a matching operation ends (EXPIRED, or ERROR) instead of
 *   running it; the resource stays READY and billing (Together only: a Baseten run's session is the run).
 *   On Tinker `session-expire` ends the model's Tinker session (as when its heartbeats stop): every model of it is lost.
 * - `capacity-queue`: a resource create waits in the capacity queue (from `queuePosition`, counting down) for
 *   `durationMs`, then provisions; `capacity-timeout`: it waits as long, then fails (capacity wait timeout).
 * - `delay`: a matching request waits `delayMs` before it is handled (a slow phase, for chaos tests).
 * - `duplicate-create`: a create is applied twice, as a service that does not dedupe a resent create would (Baseten's
 *   paired sampler create: an extra sampler of the run's session, billed on its own, which deactivating the run
 *   leaves up).
 * - `echo-headers`: answered before the request is handled (nothing applied) with `status` and an error message that
 *   quotes the request's headers, credentials included, as a misconfigured gateway does: what a client must never
 *   log or pass on in clear.
 */
export const FAULT_KINDS = [
  'http-429',
  'http-500',
  'http-503',
  'reset',
  'lose-response',
  'fail-operation',
  'resource-error',
  'preempt',
  'session-expire',
  'session-error',
  'capacity-queue',
  'capacity-timeout',
  'delay',
  'duplicate-create',
  'echo-headers',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Faults drawn when an operation runs, and when a resource is created. */
export const OPERATION_FAULTS: readonly FaultKind[] = ['fail-operation', 'resource-error', 'preempt', 'session-expire', 'session-error'];
export const CAPACITY_FAULTS: readonly FaultKind[] = ['capacity-queue', 'capacity-timeout'];

/** Kinds that exist only on some dialects: elsewhere their rules neither match nor count an event as seen. */
const ONLY_ON: Partial<Record<FaultKind, readonly string[]>> = { 'session-expire': ['together', 'tinker'], 'session-error': ['together'] };

/** The engine's operation error codes; Together's full enum names are accepted too. */
const ErrorCode = z.preprocess(
  (v) => (typeof v === 'string' ? v.replace(/^TRAINING_OPERATION_ERROR_CODE_/, '') : v),
  z.enum(OPERATION_ERROR_CODES),
);

export const FaultRuleSchema = z.object({
  kind: z.enum(FAULT_KINDS),
  rate: z.number().min(0).max(1).default(1),
  max: z.number().int().min(0).max(100_000).default(1),
  /** Skip this many matching events before the rule may fire. */
  after: z.number().int().min(0).default(0),
  method: z.string().optional(),
  /** A regular expression tested against the request path. */
  path: z.string().optional(),
  /** Operation kind (dialect-neutral: forward-backward, optim-step, sample, ...) for operation-level faults. */
  operation: z.string().optional(),
  /** Only on this dialect's resources and sessions (operation-level and capacity faults). */
  dialect: z.enum(['together', 'baseten']).optional(),
  /** `fail-operation`: the code the operation fails with. */
  errorCode: ErrorCode.default('INTERNAL_ERROR'),
  retryAfterMs: z.number().int().min(0).max(60_000).default(200),
  /** `echo-headers`: the status answered (a 5xx is retried by clients, a 401 is not). */
  status: z.number().int().min(400).max(599).default(500),
  delayMs: z.number().int().min(0).max(600_000).default(1000),
  /** `capacity-queue` / `capacity-timeout`: how long the create waits in the queue. */
  durationMs: z.number().int().min(0).max(3_600_000).default(2000),
  /** `capacity-queue` / `capacity-timeout`: the queue position the create starts at (it counts down to 1). */
  queuePosition: z.number().int().min(1).max(100_000).default(5),
});

export const FaultConfigSchema = z.object({
  seed: z.number().int().default(1),
  /** Added to every request before it is handled. */
  latencyMs: z.number().int().min(0).max(60_000).default(0),
  rules: z.array(FaultRuleSchema).max(100).default([]),
  /** Baseten's run, sampler and deployment listings answer this many per page (`next_page_token`); unset: one page. */
  listPageSize: z.number().int().min(1).max(10_000).optional(),
});

export type FaultRule = z.infer<typeof FaultRuleSchema>;
export type FaultConfig = z.infer<typeof FaultConfigSchema>;

export interface FaultEvent {
  method?: string;
  path?: string;
  operation?: string;
  dialect?: string;
}

interface RuleState {
  rule: FaultRule;
  seen: number;
  fired: number;
}

export class FaultInjector {
  private config: FaultConfig = FaultConfigSchema.parse({});
  private states: RuleState[] = [];
  private random = seededRandom(1);

  configure(input: unknown): FaultConfig {
    this.config = FaultConfigSchema.parse(input ?? {});
    this.states = this.config.rules.map((rule) => ({ rule, seen: 0, fired: 0 }));
    this.random = seededRandom(this.config.seed);
    return this.config;
  }

  get latencyMs(): number {
    return this.config.latencyMs;
  }

  get listPageSize(): number | undefined {
    return this.config.listPageSize;
  }

  /** The first rule among `kinds` that fires for this event, counting it; undefined when none does. */
  draw(kinds: readonly FaultKind[], event: FaultEvent): FaultRule | undefined {
    for (const state of this.states) {
      const { rule } = state;
      if (!kinds.includes(rule.kind)) continue;
      if (rule.method && rule.method.toUpperCase() !== event.method?.toUpperCase()) continue;
      if (rule.path && !(event.path && new RegExp(rule.path).test(event.path))) continue;
      if (rule.operation && rule.operation !== event.operation) continue;
      if (rule.dialect && rule.dialect !== event.dialect) continue;
      const only = ONLY_ON[rule.kind];
      if (only && !(event.dialect && only.includes(event.dialect))) continue;
      if (state.fired >= rule.max) continue;
      state.seen += 1;
      if (state.seen <= rule.after) continue;
      if (this.random() >= rule.rate) continue;
      state.fired += 1;
      return rule;
    }
    return undefined;
  }

  report(): { config: FaultConfig; fired: { kind: FaultKind; fired: number; seen: number }[] } {
    return { config: this.config, fired: this.states.map((s) => ({ kind: s.rule.kind, fired: s.fired, seen: s.seen })) };
  }
}

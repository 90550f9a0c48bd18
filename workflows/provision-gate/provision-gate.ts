import { allHandlersFinished, ApplicationFailure, condition, continueAsNew, setHandler, uuid4, workflowInfo } from '@temporalio/workflow';
import { GATE_BUSY } from '../../config/rules/provision-gate';
import {
  acquireGateUpdate,
  provisionGateStateQuery,
  noteListingUpdate,
  releaseGateUpdate,
  type AcquireGateRequest,
  type AcquireGateResult,
  type GateLease,
  type OthersSince,
  type ProvisionGateInput,
  type ProvisionGateState,
  type NoteListingRequest,
  type ReleaseGateRequest,
} from './contract';

/** Grants remembered for `othersSince`: far more than can pass while one round's provision is retried. */
const REMEMBERED_GRANTS = 256;

/** A waiter asks again after its place ahead × the mean hold, within these bounds, and keeps its place that long more. */
const MIN_RETRY_AFTER_MS = 50;
const MAX_RETRY_AFTER_MS = 5000;
const PLACE_KEPT_MS = 3000;
/** The mean hold before any holder released (a list and a create on a hosted API). */
const INITIAL_MEAN_HOLD_MS = 500;

/**
 * The provision gate of one (provider endpoint + account, model): trainer creates there happen one round at a time,
 * so a resource that appears while a round holds the gate is that round's, tag or no tag. The activity that
 * provisions acquires it (update-with-start) before listing and creating, and releases it as soon as the trainer's
 * id is in its heartbeat, saying what it created. A lease runs out unless renewed, so a dead holder blocks the
 * others only that long. Long-lived: continues as new when its history grows, completes when idle.
 */
export async function provisionGateWorkflow(input: ProvisionGateInput = {}): Promise<void> {
  const gate = new ProvisionGate(input.state ?? { epoch: uuid4(), generation: 0, grants: [] }, Date.now());
  let draining = false;

  // Its messages (contract.ts), answered from its first workflow task on: acquire, release and a listing (updates), its state.
  setHandler(
    acquireGateUpdate,
    (request) => {
      const leaseMs = request.leaseSeconds * 1000;
      if (!request.renewOnly && gate.mayTake(request.owner, Date.now())) gate.take(request.owner, leaseMs, Date.now());
      if (!gate.holds(request.owner, Date.now())) return request.renewOnly ? gate.refusal() : gate.wait(request.owner, Date.now());
      const lease = gate.renew(request.owner, leaseMs, Date.now());
      return {
        granted: true,
        lease,
        othersSince: request.since && gate.othersSince(request.owner, request.since),
        listing: gate.listingOf(lease.generation),
        ...(request.provisioning !== undefined ? { mine: gate.createdFor(request.owner, request.provisioning) } : {}),
      };
    },
    {
      // A busy gate takes the waiter into its line and tells it when to ask again (its place ahead × how long holders
      // hold), so a thousand rounds waiting on one account ask a few times each instead of every second or two: the
      // server allows 10 updates in flight per workflow, and a poll that is turned away costs a workflow task anyway.
      // While continuing as new it turns everyone away (the line carries over); they ask the next run.
      validator: (request) => {
        validateAcquire(request);
        if (draining) throw ApplicationFailure.create({ type: GATE_BUSY, nonRetryable: true, message: 'continuing as new' });
      },
    },
  );
  setHandler(releaseGateUpdate, (request) => gate.release(request, Date.now()), { validator: validateRelease });
  setHandler(noteListingUpdate, (request) => gate.noteListing(request, Date.now()), { validator: validateRelease });
  setHandler(provisionGateStateQuery, () => gate.snapshot());

  const idleMs = (input.idleMinutes ?? 60) * 60_000;
  const maxHistoryEvents = input.maxHistoryEvents ?? 10_000;
  const historyFull = () => workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= maxHistoryEvents;
  for (;;) {
    const now = Date.now();
    gate.expire(now);
    if (historyFull()) break;
    if (gate.idleFor(now) >= idleMs && allHandlersFinished()) return;
    const seen = gate.version;
    const wake = gate.msToExpiry(now) ?? idleMs - gate.idleFor(now);
    await condition(() => gate.version !== seen || historyFull(), Math.max(wake, 1000));
  }
  // Waiters answer "not yet" at once (they ask the next run); the holder and the memory of grants carry over.
  draining = true;
  await condition(allHandlersFinished);
  await continueAsNew<typeof provisionGateWorkflow>({ ...input, state: gate.state() });
}

/** The gate's rules, apart from message plumbing: one holder at a time, first come first served, leases that run out. */
export class ProvisionGate {
  /** Bumped on every change: wakes the main loop. */
  version = 0;
  private lastChangeMs: number;

  constructor(
    private readonly s: ProvisionGateState,
    nowMs: number,
  ) {
    this.lastChangeMs = nowMs;
  }

  holds(owner: string, nowMs: number): boolean {
    const holder = this.s.holder;
    return holder !== undefined && holder.owner === owner && holder.expiresAtMs > nowMs;
  }

  /** The gate is free (no holder, or its lease ran out) and nobody is ahead of the owner in line. */
  mayTake(owner: string, nowMs: number): boolean {
    const holder = this.s.holder;
    if (holder !== undefined && holder.expiresAtMs > nowMs) return false;
    this.leaveLine((e) => e.untilMs <= nowMs);
    const head = this.s.line?.[0];
    return head === undefined || head.owner === owner;
  }

  /** The owner waits its turn: its place in line (taken now if it had none) and when to ask again. */
  wait(owner: string, nowMs: number): AcquireGateResult {
    this.leaveLine((e) => e.untilMs <= nowMs);
    const line = (this.s.line ??= []);
    let place = line.findIndex((e) => e.owner === owner);
    if (place < 0) place = line.push({ owner, untilMs: 0 }) - 1;
    this.handOff(nowMs); // a free gate with others ahead: theirs
    const held = this.s.holder !== undefined && this.s.holder.expiresAtMs > nowMs;
    const ahead = place + (held ? 1 : 0);
    const retryAfterMs = Math.round(Math.min(MAX_RETRY_AFTER_MS, Math.max(MIN_RETRY_AFTER_MS, ahead * this.meanHoldMs() * 0.8)));
    line[place]!.untilMs = nowMs + retryAfterMs + PLACE_KEPT_MS;
    this.changed(nowMs);
    return { granted: false, holder: this.s.holder?.owner, waiting: place + 1, retryAfterMs };
  }

  private meanHoldMs(): number {
    return this.s.meanHoldMs ?? INITIAL_MEAN_HOLD_MS;
  }

  private leaveLine(which: (e: { owner: string; untilMs: number }) => boolean): void {
    if (this.s.line?.some(which)) this.s.line = this.s.line.filter((e) => !which(e));
  }

  /** `handedOff`: granted to the head of the line, which learns of it when it next asks (see handOff). */
  take(owner: string, leaseMs: number, nowMs: number, handedOff = false): void {
    this.expire(nowMs);
    // The lease that has just run out handed the gate to the first in line, this very owner (its acquire arrived
    // before the timer that would have handed it over): that grant is the owner's, not a second one beside it.
    if (!handedOff && this.s.holder?.owner === owner) return;
    const generation = ++this.s.generation;
    this.leaveLine((e) => e.owner === owner);
    this.s.holder = { owner, generation, expiresAtMs: nowMs + leaseMs, takenAtMs: nowMs };
    this.s.grants.push({ generation, owner, settled: false, ...(handedOff ? { unclaimed: true } : {}) });
    if (this.s.grants.length > REMEMBERED_GRANTS) this.s.grants.splice(0, this.s.grants.length - REMEMBERED_GRANTS);
    this.changed(nowMs);
  }

  /** Extends the holder's lease (an acquire by the holder is a renewal). */
  renew(owner: string, leaseMs: number, nowMs: number): GateLease {
    const holder = this.s.holder!;
    if (holder.owner !== owner) throw new Error(`renew by ${owner}, but ${holder.owner} holds the gate`);
    holder.expiresAtMs = Math.max(holder.expiresAtMs, nowMs + leaseMs);
    const grant = this.s.grants.find((g) => g.generation === holder.generation);
    if (grant?.unclaimed) delete grant.unclaimed;
    this.changed(nowMs);
    return { epoch: this.s.epoch, generation: holder.generation };
  }

  /** A lease that ran out frees the gate; its grant stays unsettled unless its owner reports later. */
  expire(nowMs: number): void {
    if (this.s.holder && this.s.holder.expiresAtMs <= nowMs) {
      // Handed to a waiter that never asked again: it never knew it held the gate, so it created nothing under it.
      const generation = this.s.holder.generation;
      const grant = this.s.grants.find((g) => g.generation === generation && g.unclaimed);
      if (grant) {
        grant.settled = true;
        delete grant.unclaimed;
      }
      this.s.holder = undefined;
      this.changed(nowMs);
      this.handOff(nowMs);
    }
  }

  /**
   * A freed gate goes straight to the first live waiter in line, for as long as its place is kept: it is granted when
   * it next asks (as it was told to), with no turn lost to a poll that finds the gate free a moment too late.
   */
  private handOff(nowMs: number): void {
    if (this.s.holder) return;
    this.leaveLine((e) => e.untilMs <= nowMs);
    const head = this.s.line?.[0];
    if (head) this.take(head.owner, head.untilMs - nowMs, nowMs, true);
  }

  /** The holder's listing before it creates, on its grant. */
  noteListing(request: NoteListingRequest, nowMs: number): boolean {
    const grant = this.s.grants.find((g) => g.generation === request.lease.generation && g.owner === request.owner);
    if (request.lease.epoch !== this.s.epoch || !grant || grant.settled) return false;
    grant.listing = request.listing;
    this.changed(nowMs);
    return true;
  }

  listingOf(generation: number): string[] | undefined {
    return this.s.grants.find((g) => g.generation === generation && !g.settled)?.listing;
  }

  /** Settles a grant with what its owner created (late too: a lease that ran out), and frees the gate if it is held. */
  release(request: ReleaseGateRequest, nowMs: number): boolean {
    if (request.lease.epoch !== this.s.epoch) return false;
    const grant = this.s.grants.find((g) => g.generation === request.lease.generation && g.owner === request.owner);
    if (!grant) return false;
    grant.settled = true;
    if (request.resourceId !== undefined) grant.resourceId = request.resourceId;
    if (request.provisioning !== undefined) grant.provisioning = request.provisioning;
    if (this.s.holder?.generation === request.lease.generation) {
      const taken = this.s.holder.takenAtMs;
      if (taken !== undefined) this.s.meanHoldMs = Math.round(0.8 * this.meanHoldMs() + 0.2 * (nowMs - taken));
      this.s.holder = undefined;
      this.handOff(nowMs);
    }
    this.changed(nowMs);
    return true;
  }

  /** What an owner said it created for one provisioning, oldest first. */
  createdFor(owner: string, provisioning: string): string[] {
    return this.s.grants.flatMap((g) =>
      g.owner === owner && g.provisioning === provisioning && g.resourceId !== undefined ? [g.resourceId] : [],
    );
  }

  othersSince(owner: string, since: GateLease): OthersSince {
    const oldest = this.s.grants[0]?.generation ?? this.s.generation + 1;
    const remembered = since.epoch === this.s.epoch && oldest <= since.generation + 1;
    const later = this.s.grants.filter((g) => g.generation > since.generation && g.owner !== owner);
    return {
      claimed: later.flatMap((g) => (g.resourceId !== undefined ? [g.resourceId] : [])),
      uncertain: !remembered || later.some((g) => !g.settled),
    };
  }

  refusal(): AcquireGateResult {
    return { granted: false, holder: this.s.holder?.owner, waiting: 0 };
  }

  msToExpiry(nowMs: number): number | undefined {
    return this.s.holder && this.s.holder.expiresAtMs - nowMs;
  }

  idleFor(nowMs: number): number {
    return this.s.holder === undefined ? nowMs - this.lastChangeMs : 0;
  }

  state(): ProvisionGateState {
    return this.s;
  }

  snapshot(): ProvisionGateState & { waiting: string[] } {
    return { ...this.s, waiting: (this.s.line ?? []).map((e) => e.owner) };
  }

  private changed(nowMs: number): void {
    this.version += 1;
    this.lastChangeMs = nowMs;
  }
}

function validateAcquire(request: AcquireGateRequest): void {
  if (typeof request?.owner !== 'string' || request.owner.length === 0) throw new Error('owner must be a non-empty string');
  if (!(request.leaseSeconds >= 1 && request.leaseSeconds <= 3600)) throw new Error('leaseSeconds must be within 1..3600');
  if (!(request.waitSeconds >= 0 && request.waitSeconds <= 60)) throw new Error('waitSeconds must be within 0..60');
}

function validateRelease(request: ReleaseGateRequest): void {
  if (typeof request?.owner !== 'string' || typeof request.lease?.epoch !== 'string' || !Number.isInteger(request.lease.generation))
    throw new Error('release needs the owner and the lease it was granted');
}

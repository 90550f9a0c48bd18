import { defineQuery, defineUpdate } from '@temporalio/workflow';
import { ACQUIRE_GATE_UPDATE, NOTE_LISTING_UPDATE, RELEASE_GATE_UPDATE } from '../../config/rules/provision-gate';

/** One grant of the gate: `epoch` names this gate's life (a gate started anew has another), `generation` the grant. */
export interface GateLease {
  epoch: string;
  generation: number;
}

export interface AcquireGateRequest {
  /** The round's workflow id. The owner holding the gate gets its lease back at once (a retried attempt). */
  owner: string;
  /** The lease runs out this long after the last acquire unless renewed: a dead holder blocks others no longer. */
  leaseSeconds: number;
  /** How long to wait in line before answering "not yet" (the caller heartbeats and asks again). */
  waitSeconds: number;
  /** Renew only: extend the lease if the caller still holds it, never join the line. */
  renewOnly?: boolean;
  /** The caller's earlier lease: the answer says what other owners created under their grants since. */
  since?: GateLease;
  /** The provisioning the caller acquires for (its activity: the same across retries); the answer gives its creates. */
  provisioning?: string;
}

/** What owners other than the caller created under the grants after a lease. */
export interface OthersSince {
  /** The resources they reported (created or adopted). */
  claimed: string[];
  /**
   * Some grant ended without its owner saying what it created (its lease ran out), or lies beyond what the gate
   * remembers (another epoch, trimmed): a resource nobody tagged can then not be attributed.
   */
  uncertain: boolean;
}

export type AcquireGateResult =
  | {
      granted: true;
      lease: GateLease;
      othersSince?: OthersSince;
      listing?: string[];
      /**
       * What this owner said it created under earlier grants of the same provisioning, oldest first: a retried attempt
       * whose heartbeat never carried the id gets it back (its own word, under its own lease).
       */
      mine?: string[];
    }
  | {
      granted: false;
      holder?: string;
      /** The caller's place in line (1: next), or 0 where the gate keeps no line (an older gate, or renewOnly). */
      waiting: number;
      /**
       * Ask again after this long: the caller's place is kept until a little after it (the gate estimates it from
       * the place and how long holders have held). Absent from an older gate: the caller backs off on its own.
       */
      retryAfterMs?: number;
    };

/** The holder's listing before it creates, kept by the gate (durable, unlike a throttled heartbeat). */
export interface NoteListingRequest {
  owner: string;
  lease: GateLease;
  listing: string[];
}

export interface ReleaseGateRequest {
  owner: string;
  lease: GateLease;
  /** The resource created or adopted under the lease; absent means certainly none was. */
  resourceId?: string;
  /** The provisioning it was created for (see AcquireGateRequest). */
  provisioning?: string;
}

/** A grant as the gate remembers it. */
export interface GateGrant {
  generation: number;
  owner: string;
  /** Its owner said what it created (`resourceId`, or nothing): false while held, and for a lease that ran out. */
  settled: boolean;
  resourceId?: string;
  provisioning?: string;
  /** The account's resources its holder listed before creating: a retried attempt of the same owner gets it back. */
  listing?: string[];
  /** Handed to the first in line, which has not asked since (it cannot have created anything under it yet). */
  unclaimed?: boolean;
}

/** The gate's state: what continue-as-new carries (waiters are not carried: their updates finish first). */
export interface ProvisionGateState {
  epoch: string;
  /** The latest grant's generation. */
  generation: number;
  holder?: { owner: string; generation: number; expiresAtMs: number; takenAtMs?: number };
  /**
   * Owners waiting, first come first served. A place is kept until `untilMs` (a little after the time the owner was
   * told to ask again), so a waiter that died leaves the line on its own. Absent in gates from before the line.
   */
  line?: { owner: string; untilMs: number }[];
  /** How long holders hold the gate (moving average): what the waiting are told to wait per place ahead. */
  meanHoldMs?: number;
  /** The latest grants, oldest first (bounded). */
  grants: GateGrant[];
}

export interface ProvisionGateInput {
  state?: ProvisionGateState;
  /** Continue-as-new past this many history events (also when the server suggests it). */
  maxHistoryEvents?: number;
  /** Complete after this long with no holder, no waiter and no message. */
  idleMinutes?: number;
}

export const acquireGateUpdate = defineUpdate<AcquireGateResult, [AcquireGateRequest]>(ACQUIRE_GATE_UPDATE);
export const releaseGateUpdate = defineUpdate<boolean, [ReleaseGateRequest]>(RELEASE_GATE_UPDATE);
export const noteListingUpdate = defineUpdate<boolean, [NoteListingRequest]>(NOTE_LISTING_UPDATE);
export const provisionGateStateQuery = defineQuery<ProvisionGateState & { waiting: string[] }>('provisionGateState');

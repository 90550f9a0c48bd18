import { CancelledFailure, log } from '@temporalio/activity';
import { WithStartWorkflowOperation, WorkflowUpdateFailedError, isGrpcServiceError, type Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import {
  ACQUIRE_GATE_UPDATE,
  GATE_BUSY,
  NOTE_LISTING_UPDATE,
  PROVISION_GATE_WORKFLOW,
  RELEASE_GATE_UPDATE,
  provisionGateWorkflowId,
  type ProvisionGateKey,
} from '../config/rules/provision-gate';
import type { provisionGateWorkflow } from '../workflows/provision-gate/provision-gate';
import type {
  AcquireGateRequest,
  AcquireGateResult,
  GateLease,
  NoteListingRequest,
  OthersSince,
  ReleaseGateRequest,
} from '../workflows/provision-gate/contract';

/** gRPC status codes (google.rpc.Code) the server answers a turned-away update with. */
const GRPC_RESOURCE_EXHAUSTED = 8;
const GRPC_UNAVAILABLE = 14;

/** A busy gate is asked again after a jittered wait growing to this (the caller heartbeats meanwhile). */
const MAX_POLL_MS = 2000;

/** How long the holder keeps asking a server that turns its updates away (well within a lease). */
const HOLDER_RETRY_MS = 20_000;

/**
 * A held provision gate (workflows/provision-gate/provision-gate.ts): trainer creates on this account and model are this owner's
 * alone until it is released. The lease is renewed in the background, so it runs out only if this process stops.
 */
export class ProvisionGateHold {
  private renewal: NodeJS.Timeout | undefined;

  private constructor(
    private readonly client: Client,
    private readonly workflowId: string,
    private readonly owner: string,
    private readonly leaseSeconds: number,
    readonly lease: GateLease,
    /** Given the caller's earlier lease: what other owners created under their grants since. */
    readonly othersSince: OthersSince | undefined,
    /** A lease taken back by the same owner: the listing its earlier attempt noted before creating. */
    readonly listing: string[] | undefined,
    /** What this owner said it created for the same provisioning under earlier grants, oldest first. */
    readonly mine: string[],
    private readonly provisioning: string | undefined,
  ) {}

  /** Waits in line until the gate is the owner's (at once if it holds it already), starting the gate if need be. */
  static async acquire(
    client: Client,
    options: {
      gate: ProvisionGateKey;
      owner: string;
      leaseSeconds: number;
      since?: GateLease;
      /** The provisioning this is for (the same across its retries): the gate gives back what it created before. */
      provisioning?: string;
      signal?: AbortSignal;
      onWait?: () => void;
    },
  ): Promise<ProvisionGateHold> {
    const workflowId = provisionGateWorkflowId(options.gate);
    const request: AcquireGateRequest = {
      owner: options.owner,
      leaseSeconds: options.leaseSeconds,
      waitSeconds: 0,
      since: options.since,
      provisioning: options.provisioning,
    };
    let retryAfterMs: number | undefined;
    for (let polls = 0; ; polls++) {
      if (options.signal?.aborted) throw new CancelledFailure('cancelled while waiting for the provision gate');
      const startWorkflowOperation = new WithStartWorkflowOperation<typeof provisionGateWorkflow>(PROVISION_GATE_WORKFLOW, {
        workflowId,
        taskQueue: options.gate.taskQueue,
        args: [{}],
        workflowIdConflictPolicy: 'USE_EXISTING',
      });
      try {
        const result = await client.workflow.executeUpdateWithStart<typeof provisionGateWorkflow, AcquireGateResult, [AcquireGateRequest]>(
          ACQUIRE_GATE_UPDATE,
          { args: [request], startWorkflowOperation },
        );
        if (result.granted) {
          const hold = new ProvisionGateHold(
            client,
            workflowId,
            options.owner,
            options.leaseSeconds,
            result.lease,
            result.othersSince,
            result.listing,
            result.mine ?? [],
            options.provisioning,
          );
          hold.keepAlive();
          return hold;
        }
        retryAfterMs = result.retryAfterMs;
      } catch (err) {
        if (!isGateBusy(err)) throw err;
        retryAfterMs = undefined;
      }
      options.onWait?.();
      // In line: when the gate said (a little jitter, never past the place it keeps). Turned away, or an older gate
      // without a line: back off on our own.
      const ms =
        retryAfterMs !== undefined
          ? retryAfterMs * (0.9 + Math.random() * 0.2)
          : Math.min(MAX_POLL_MS, 100 * 2 ** Math.min(polls, 5)) * (0.5 + Math.random());
      await new Promise((resolve) => setTimeout(resolve, ms));
    }
  }

  /**
   * Settles a grant with what was created under it, and frees the gate if the grant still holds it. Also what a
   * later attempt does for an earlier one that recorded its trainer but died before releasing.
   */
  static async settle(client: Client, gate: ProvisionGateKey, request: ReleaseGateRequest): Promise<void> {
    return settle(client, provisionGateWorkflowId(gate), request);
  }

  /**
   * Keeps the listing made before creating on the grant (an update: durable once it returns). A heartbeat is
   * throttled, so a worker killed right after creating may never have sent its listing; a retry gets this one back.
   */
  async noteListing(listing: string[]): Promise<void> {
    try {
      await whenAccepted(() =>
        this.client.workflow
          .getHandle(this.workflowId)
          .executeUpdate<boolean, [NoteListingRequest]>(NOTE_LISTING_UPDATE, { args: [{ owner: this.owner, lease: this.lease, listing }] }),
      );
    } catch (err) {
      // Best effort: a gate still run by an older worker has no such update (a rolling deploy); the heartbeat remains.
      log.warn('could not note the listing on the provision gate', { owner: this.owner, error: String(err) });
    }
  }

  /** Releases the gate, saying what was created under the lease (`undefined`: certainly nothing). */
  async release(resourceId: string | undefined): Promise<void> {
    this.abandon();
    await settle(this.client, this.workflowId, { owner: this.owner, lease: this.lease, resourceId, provisioning: this.provisioning });
  }
  /**
   * Stops renewing without releasing: what was created under the lease is not known. A retried attempt of the same
   * owner takes the lease back at once; otherwise it runs out, and its grant stays unsettled.
   */
  abandon(): void {
    clearInterval(this.renewal);
    this.renewal = undefined;
  }

  private keepAlive(): void {
    const request: AcquireGateRequest = { owner: this.owner, leaseSeconds: this.leaseSeconds, waitSeconds: 0, renewOnly: true };
    this.renewal = setInterval(
      () => {
        whenAccepted(() =>
          this.client.workflow
            .getHandle(this.workflowId)
            .executeUpdate<AcquireGateResult, [AcquireGateRequest]>(ACQUIRE_GATE_UPDATE, { args: [request] }),
        )
          .then((result) => {
            if (!result.granted) log.warn('the provision gate lease ran out while held', { owner: this.owner });
          })
          .catch((err: unknown) => log.warn('could not renew the provision gate lease', { owner: this.owner, error: String(err) }));
      },
      (this.leaseSeconds * 1000) / 3,
    );
  }
}

async function settle(client: Client, workflowId: string, request: ReleaseGateRequest): Promise<void> {
  try {
    await whenAccepted(() =>
      client.workflow.getHandle(workflowId).executeUpdate<boolean, [ReleaseGateRequest]>(RELEASE_GATE_UPDATE, { args: [request] }),
    );
  } catch (err) {
    // The lease runs out on its own; until its grant is settled, others cannot attribute an untagged resource by it.
    log.warn('could not release the provision gate', { owner: request.owner, generation: request.lease.generation, error: String(err) });
  }
}

/**
 * The gate rejected an acquire because another owner holds it (its validator's answer: nothing was recorded), or the
 * server turned the update away before the gate saw it: more than 10 updates in flight on one workflow (hundreds of
 * rounds polling one account) or an update aborted by a workflow task that failed over. Either way: ask again.
 */
function isGateBusy(err: unknown): boolean {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : undefined;
  if (cause instanceof ApplicationFailure && cause.type === GATE_BUSY) return true;
  return isTurnedAway(err);
}

/** The server turned an update away before the gate saw it (too many in flight on the workflow, or aborted). */
function isTurnedAway(err: unknown): boolean {
  const grpc = [err, (err as { cause?: unknown } | undefined)?.cause].find(isGrpcServiceError);
  const code = Number(grpc?.code);
  return code === GRPC_RESOURCE_EXHAUSTED || code === GRPC_UNAVAILABLE;
}

/**
 * The holder's own updates (listing, release, renewal) are asked again while the server turns them away: with
 * hundreds of rounds polling one gate, its 10 in-flight updates are often taken, and a release given up on would
 * keep the gate shut until the lease runs out (a minute per round). Anything else fails at once.
 */
async function whenAccepted<T>(update: () => Promise<T>, timeoutMs = HOLDER_RETRY_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await update();
    } catch (err) {
      if (!isTurnedAway(err) || Date.now() >= deadline) throw err;
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(500, 20 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random())));
  }
}

import { Context, log, sleep } from '@temporalio/activity';
import { RoundhouseFailure } from '../config/rules/failures';
import { ownerOfTag } from '../config/rules/owner-tag';
import { TRAINER_CREATED_SIGNAL } from '../config/rules/trainer-registry';
import type { ProvisionGateKey } from '../config/rules/provision-gate';
import { ProviderError } from '../providers/errors';
import type { TrainerResource, TrainingProvider } from '../providers/types';
import type { GateLease } from '../workflows/provision-gate/contract';
import type { ProvisionedTrainer, RoundInput, RoundSpec } from '../workflows/round/contract';
import type { ActivityDeps } from './deps';
import { atBoundary, keepingAlive } from './failures';
import { HeartbeatPacer } from './heartbeat-pacer';
import { ProvisionGateHold } from './provision-gate';
import { recordResource } from './metrics';
import { CapacityWatch } from './capacity';
import { generatorReplicasOf } from '../config/rules/trainer-shape';
import { abilitiesOf } from '../config/rules/dialects';

/** Together's documented default of concurrent LoRA sessions per resource (docs.together.ai post-training/multi-lora). */
const DEFAULT_LORA_SESSIONS = 5;

/**
 * The trainer's lifecycle: provisioned (an unanswered create is adopted by listing, only if provably this round's;
 * never created twice), a training session opened (fresh or from a checkpoint; an unanswered open is adopted by
 * name), and released on every path.
 */
/** How long a release waits for the session's own stop, after the trainer is deactivated. */
const SESSION_CLOSE_WAIT_MS = 5_000;

export function createTrainerActivities(deps: ActivityDeps) {
  return {
    /**
     * Creates the trainer and waits until it is ready. An attempt that died after the create (its response unseen)
     * leaves what it listed before in its heartbeat, and the next attempt adopts the new resource, never creating a
     * second one, but only if it is provably this round's (see createOrAdopt). The id is in the heartbeat before
     * the wait for readiness. A create the provider gives up on for want of capacity is made again, with backoff,
     * until `advanced.provisionTimeoutMinutes` after the first; meanwhile the round hears that it waits (and its
     * place in the queue, where the provider tells it).
     */
    async provisionTrainer(input: { spec: RoundSpec; ownerTag: string }): Promise<ProvisionedTrainer> {
      const provider = await deps.providerFor(input.spec.provider);
      const context = Context.current();
      const beat: ProvisionBeat = { ...(context.info.heartbeatDetails as ProvisionBeat | undefined) };
      beat.startedAtMs ??= Date.now();
      const deadlineMs = beat.startedAtMs + input.spec.advanced.provisionTimeoutMinutes * 60_000;
      const capacity = new CapacityWatch(context.client, context.info.workflowExecution, beat.startedAtMs, (beat.capacityRetries ?? 0) + 1);
      return atBoundary(
        async () => {
          // The moments that matter send at once; between them, a keepalive within the worker's heartbeat budget.
          const pacer = new HeartbeatPacer<ProvisionBeat>({ keepaliveMs: (gapMs) => Math.max(1000, gapMs) });
          const heartbeat = () => pacer.sendNow(beat);
          heartbeat();
          try {
            for (;;) {
              if (!beat.resourceId) {
                beat.resourceId = await createOrAdopt(provider, input, beat, heartbeat);
                await tellRoundCreated(beat.resourceId);
              } else if (beat.gate && !provider.tagsResourcesAtCreate) {
                // The earlier attempt recorded its trainer; its release may not have reached the gate.
                await ProvisionGateHold.settle(context.client, gateKey(provider, input.spec), {
                  owner: gateOwner(input.ownerTag),
                  lease: beat.gate,
                  resourceId: beat.resourceId,
                });
              }
              const resourceId = beat.resourceId;
              let queued = false;
              try {
                await provider.waitReady(resourceId, {
                  timeoutMs: Math.max(0, deadlineMs - Date.now()),
                  signal: context.cancellationSignal,
                  onWait: (r) => {
                    queued = r.queuePosition !== undefined;
                    capacity.note(r);
                  },
                });
              } catch (err) {
                // A worker shutting down (a deploy) or a passing polling failure: keep the trainer (and its place in a
                // capacity queue); the id is in the heartbeat, and the retry resumes waiting for it.
                if (context.cancellationDetails?.workerShutdown || isPassing(err)) throw err;
                // Cancelled by the round, failed, or out of time: the workflow may never hear the id, so release it here.
                await provider.deactivate(resourceId).catch(() => undefined);
                const noCapacity = err instanceof ProviderError && err.code === 'NO_CAPACITY';
                const timedOut = err instanceof ProviderError && err.code === 'POLL_TIMEOUT';
                if (!noCapacity && !(timedOut && (queued || capacity.creates > 1))) throw err;
                const remainingMs = deadlineMs - Date.now();
                if (timedOut || remainingMs <= 0) {
                  capacity.clear();
                  throw new RoundhouseFailure(
                    'CapacityUnavailable',
                    `no capacity for ${input.spec.provider.model} within advanced.provisionTimeoutMinutes (${input.spec.advanced.provisionTimeoutMinutes} min, ${capacity.creates} create${capacity.creates === 1 ? '' : 's'}); nothing is left active`,
                    { resourceId },
                  );
                }
                beat.capacityRetries = capacity.creates;
                beat.resourceId = beat.before = beat.gate = undefined;
                const backoffMs = capacityBackoffMs(capacity.creates, remainingMs);
                log.info('no capacity for the trainer; creating again', { resourceId, creates: capacity.creates, backoffMs });
                capacity.retrying();
                heartbeat();
                await sleep(backoffMs);
                continue;
              }
              capacity.clear();
              await capacity.flush();
              recordResource('provisioned', { provider: input.spec.provider.kind });
              return {
                resourceId,
                readyAtMs: Date.now(),
                ...(capacity.creates > 1 || queued
                  ? { capacityWait: { creates: capacity.creates, waitedMs: Date.now() - beat.startedAtMs! } }
                  : {}),
              };
            }
          } finally {
            pacer.stop();
          }
        },
        () => ({ resourceId: beat.resourceId }),
      );
    },

    /** Opens the training session: fresh, or from a training checkpoint (with or without optimizer state). */
    async openTrainingSession(input: {
      spec: RoundSpec;
      resourceId: string;
      ownerTag: string;
      startFrom?: RoundInput['startFrom'];
      /** The campaign (W&B's default group); absent in rounds recorded before. */
      campaignId?: string;
    }): Promise<{ sessionId: string; stepOffset: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      const previous = Context.current().info.heartbeatDetails as { sessionId?: string } | undefined;
      return atBoundary(async () => {
        Context.current().heartbeat({ sessionId: previous?.sessionId, attempt: true });
        if (previous?.sessionId) {
          const existing = await provider.getSession(previous.sessionId).catch(() => undefined);
          if (existing?.state === 'running') return { sessionId: existing.id, stepOffset: existing.step };
        }
        const displayName = input.ownerTag.slice(0, 200);
        // An unanswered create may have opened a session: adopt it rather than opening a second.
        const adopt = async () =>
          (await provider.listSessions(input.resourceId)).find((s) => s.displayName === displayName && s.state === 'running');
        let session = previous ? await adopt() : undefined;
        if (!session) {
          try {
            session = await provider.openSession({
              resourceId: input.resourceId,
              baseModel: input.spec.provider.model,
              loraRank: input.spec.training.loraRank,
              loraAlpha: input.spec.training.loraAlpha,
              seed: input.spec.training.seed,
              ...(input.spec.retention?.ttl !== undefined ? { checkpointTtlSeconds: input.spec.retention.ttl } : {}),
              fromCheckpoint: input.startFrom && { id: input.startFrom.checkpointId, loadOptimizer: input.startFrom.loadOptimizer },
              displayName,
              ...wandbMetadata(input.spec, input.ownerTag, input.campaignId),
            });
          } catch (err) {
            if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
            session = await adopt();
            if (!session)
              throw new RoundhouseFailure(
                'SessionUnconfirmed',
                `session create outcome unknown and none found on ${input.resourceId}; retrying`,
              );
          }
        }
        Context.current().heartbeat({ sessionId: session.id });
        return { sessionId: session.id, stepOffset: session.step };
      });
    },

    /**
     * After a lost session or a failed step: whether the trainer can take a new session (READY), and the old sessions
     * closed (best effort: their LoRA slots, and weights that must not be trained further).
     */
    async prepareRecovery(input: {
      spec: RoundSpec;
      resourceId: string;
      sessionIds: string[];
    }): Promise<{ trainerReady: boolean; state: string }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        const resource = await provider.getResource(input.resourceId).catch(() => undefined);
        const trainerReady = resource?.state === 'ready';
        if (trainerReady) for (const id of input.sessionIds) await provider.closeSession(id).catch(() => undefined);
        return { trainerReady, state: resource?.providerStatus ?? 'gone' };
      });
    },

    /**
     * How many arms of a sweep one trainer takes (their sessions side by side: several LoRA adapters for the price of
     * one base model), and the trainer's quoted price. Only where the dialect publishes a per-model session limit
     * (its abilities table): the model's `adapter_capacity`, else Together's documented default of 5; a round with a
     * frozen reference opens two sessions. Undefined where nothing says how many: one trainer per arm.
     */
    async armsPerTrainer(input: { spec: RoundSpec }): Promise<{ armsPerTrainer?: number; pricePerHour?: number; gpuCount: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        const model = (await provider.supportedModels()).find((m) => m.name === input.spec.provider.model);
        const gpuCount = model?.gpuCount ?? 1;
        if (abilitiesOf(input.spec.provider.kind).loraSessionsPerResource !== 'per-model') return { gpuCount };
        const sessions = model?.adapterCapacity ?? DEFAULT_LORA_SESSIONS;
        const perArm = input.spec.round?.grpo?.reference ? 2 : 1;
        const quote = await provider.estimateCost?.(input.spec.provider.model, generatorReplicasOf(input.spec)).catch(() => undefined);
        return {
          gpuCount,
          ...(Math.floor(sessions / perArm) >= 2 ? { armsPerTrainer: Math.floor(sessions / perArm) } : {}),
          ...(quote?.currency === 'USD' ? { pricePerHour: quote.pricePerHour } : {}),
        };
      });
    },

    /**
     * Releases the trainer; idempotent, and fine with a resource that already stopped or failed. `sessionOnly`: the
     * trainer is shared (a sweep's arms side by side): only the round's sessions end, the trainer stays for the others.
     */
    async releaseTrainer(input: {
      spec: RoundSpec;
      resourceId: string;
      sessionId?: string;
      sessionOnly?: { sessionIds: string[] };
    }): Promise<{ status: string; resourceId: string }> {
      const provider = await deps.providerFor(input.spec.provider);
      const only = input.sessionOnly;
      if (only)
        return keepingAlive(() =>
          atBoundary(async () => {
            for (const id of only.sessionIds) await provider.closeSession(id);
            return { status: 'session-ended', resourceId: input.resourceId };
          }),
        );
      return keepingAlive(() =>
        atBoundary(async () => {
          // Deactivate first: it stops the GPUs and the sessions on them. Closing the session as well is a courtesy that
          // must never hold the release up (a hung stop used to delay deactivation by the HTTP timeout, minutes).
          const r = await provider.deactivate(input.resourceId);
          recordResource('released', { provider: input.spec.provider.kind });
          if (input.sessionId) {
            const close = provider.closeSession(input.sessionId).catch(() => undefined);
            await Promise.race([close, new Promise((resolve) => setTimeout(resolve, SESSION_CLOSE_WAIT_MS).unref())]);
          }
          return { status: r.state === 'failed' ? 'already-failed' : 'deactivated', resourceId: input.resourceId };
        }),
      );
    },
  };
}

/**
 * The spec's W&B settings as session metadata (Together's integration: labels that tie the session to a W&B run;
 * no key). The group defaults to the campaign, the run name to the round's workflow.
 */
function wandbMetadata(spec: RoundSpec, ownerTag: string, campaignId?: string): { metadata?: Record<string, unknown> } {
  const w = spec.tracking?.wandb;
  if (!w) return {};
  const workflowId = ownerOfTag(ownerTag) ?? ownerTag;
  return {
    metadata: {
      wandb: {
        project: w.project,
        ...(w.entity ? { entity: w.entity } : {}),
        group: w.group ?? campaignId ?? workflowId,
        run_name: w.runName ?? workflowId,
      },
    },
  };
}

/** What a provisioning attempt leaves in its heartbeat for the next one. */
interface ProvisionBeat {
  /** The account's active resources before the create (listed under `gate`, where creates are gated). */
  before?: string[];
  /** The provision-gate lease `before` was listed (or the trainer adopted) under. */
  gate?: GateLease;
  resourceId?: string;
  /** When the first create of this provisioning was sent: `advanced.provisionTimeoutMinutes` counts from here. */
  startedAtMs?: number;
  /** Creates the provider gave up on for want of capacity so far. */
  capacityRetries?: number;
}

/** A provider failure that passes (5xx, 429, the network, after the HTTP helper's own retries); not the wait's end. */
function isPassing(err: unknown): boolean {
  return err instanceof ProviderError && err.errorClass === 'retryable' && err.code !== 'POLL_TIMEOUT';
}

/** Between creates the provider gave up on for want of capacity: 2 s doubling to a minute, jittered, within the limit. */
function capacityBackoffMs(creates: number, remainingMs: number): number {
  const base = Math.min(60_000, 2_000 * 2 ** Math.max(0, creates - 1));
  return Math.max(0, Math.min(remainingMs, base * (0.5 + Math.random() / 2)));
}

/**
 * The round's trainer: adopted when an earlier attempt's create went unanswered and the resource is provably this
 * round's, created otherwise. Proof is the owner tag (a Baseten run's name) or, where the provider lets a resource
 * carry none (Together), the provision gate: creates on this account and model are serialized, so a resource that
 * appeared while this round held the gate is its own. The gate is released as soon as the id is in the heartbeat,
 * before the (long) wait for readiness: the create, not readiness, is what is serialized.
 */
async function createOrAdopt(
  provider: TrainingProvider,
  input: { spec: RoundSpec; ownerTag: string },
  beat: ProvisionBeat,
  heartbeat: () => void,
): Promise<string> {
  const context = Context.current();
  const model = input.spec.provider.model;
  const gate = provider.tagsResourcesAtCreate
    ? undefined
    : await ProvisionGateHold.acquire(context.client, {
        gate: gateKey(provider, input.spec),
        owner: gateOwner(input.ownerTag),
        leaseSeconds: gateLeaseSeconds(context.info.heartbeatTimeoutMs),
        since: beat.gate,
        provisioning: provisioningId(),
        signal: context.cancellationSignal,
        onWait: heartbeat,
      });
  let settled = false; // what was created under the lease is known: release it saying so (else it runs out)
  try {
    const own = (before: string[], untaggedAreMine: boolean, claimedByOthers: string[] = []) =>
      adoptOwnResource(provider, { before, model, ownerTag: input.ownerTag, untaggedAreMine, claimedByOthers });
    let resourceId: string | undefined;
    // An earlier attempt of this round that listed under this very grant (the gate held throughout, so nobody else
    // created since) noted its listing on the gate: it stands in for a heartbeat that never arrived.
    const sameGrant = gate?.listing !== undefined && (!beat.gate || beat.gate.generation === gate.lease.generation);
    if (sameGrant && gate?.listing) {
      beat.before = gate.listing;
      beat.gate = gate.lease;
    }
    if (gate?.mine.length) {
      // An earlier attempt of this provisioning created under its own lease and said so, though its heartbeat with
      // the id never arrived (killed while the trainer was queued or starting): that trainer, if it still stands.
      const active = new Set((await provider.listOwnedResources({ activeOnly: true })).filter((r) => r.model === model).map((r) => r.id));
      resourceId = [...gate.mine].reverse().find((id) => active.has(id));
    }
    if (!resourceId && beat.before) {
      // An earlier attempt listed and may have created. Untagged, its resource is provably its own only if every
      // other round that held the gate since said what it created.
      const proven = sameGrant || (gate?.othersSince !== undefined && !gate.othersSince.uncertain);
      resourceId = await own(beat.before, proven, gate?.othersSince?.claimed);
      if (!resourceId && gate && !proven) {
        log.warn('an earlier provisioning attempt cannot be told apart from other rounds; creating anew', {
          owner: gateOwner(input.ownerTag),
        });
      }
    }
    // Where resources carry the round's tag, this round's create is known by it: one tagged for this round, created
    // since this provisioning was scheduled (the round's earlier trainers were released before it; 30 s for clock skew).
    const taggedSinceScheduled = () =>
      adoptOwnResource(provider, {
        before: [],
        model,
        ownerTag: input.ownerTag,
        untaggedAreMine: false,
        claimedByOthers: [],
        createdSinceMs: context.info.scheduledTimestampMs - 30_000,
      });
    if (!resourceId && !gate && !beat.before && context.info.attempt > 1) {
      // An earlier attempt may have created, and its heartbeat never arrived (throttled, then the worker killed).
      resourceId = await taggedSinceScheduled();
    }
    if (!resourceId) {
      // Untagged creates are attributed only against a listing made under the lease now held. Tagged ones need none:
      // the tag finds them (at 1,000 rounds on one account, listing every trainer before each create was the costliest
      // request of a round, and the listing rode in every provisioning heartbeat).
      if (gate) {
        beat.before = (await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id);
        beat.gate = gate?.lease;
        await gate?.noteListing(beat.before);
        heartbeat();
      }
      try {
        resourceId = (
          await provider.provision({
            model,
            ownerTag: input.ownerTag,
            generatorReplicas: generatorReplicasOf(input.spec),
            inactiveTimeoutSeconds: input.spec.provider.inactiveTimeoutSeconds,
            trainer: { seed: input.spec.training.seed, maxSeqLen: input.spec.training.maxSeqLen, loraRank: input.spec.training.loraRank },
            ...(input.spec.provider.baseten ? { baseten: input.spec.provider.baseten } : {}),
          })
        ).id;
      } catch (err) {
        if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) {
          settled = err instanceof ProviderError; // refused or unreachable: nothing was created
          throw err;
        }
        resourceId = beat.before ? await own(beat.before, gate !== undefined) : await taggedSinceScheduled();
        if (!resourceId) {
          settled = true;
          // The create did not happen after all: let Temporal retry it (the next attempt looks again first).
          throw new RoundhouseFailure('ProvisionUnconfirmed', 'resource create outcome unknown and no new resource found; retrying');
        }
      }
    }
    beat.resourceId = resourceId;
    beat.gate = gate?.lease ?? beat.gate;
    heartbeat();
    settled = true;
    return resourceId;
  } finally {
    if (gate && settled) await gate.release(beat.resourceId);
    else gate?.abandon();
  }
}

/**
 * The resource an unanswered create of this round made: active, of this model, not in `before`, and provably the
 * round's: tagged with its owner tag (a Baseten run's name, a session's display name), or untagged when
 * `untaggedAreMine` (no other round created since `before`) and not claimed by another round. Never another
 * round's. Should there be more than one (the round's own duplicates), the oldest is kept and the rest deactivated.
 */
async function adoptOwnResource(
  provider: TrainingProvider,
  options: {
    before: string[];
    model: string;
    ownerTag: string;
    untaggedAreMine: boolean;
    claimedByOthers: string[];
    /** Only resources the provider says were created at or after this moment (ms since epoch). */
    createdSinceMs?: number;
  },
): Promise<string | undefined> {
  const known = new Set([...options.before, ...options.claimedByOthers]);
  const since = options.createdSinceMs;
  const fresh = (await provider.listOwnedResources({ activeOnly: true })).filter(
    (r) => !known.has(r.id) && r.model === options.model && (since === undefined || Date.parse(r.createdAt) >= since),
  );
  const mine: TrainerResource[] = [];
  for (const resource of fresh) {
    const tags =
      resource.ownerTag !== undefined
        ? [resource.ownerTag]
        : (await provider.listSessions(resource.id)).flatMap((s) => (s.displayName ? [s.displayName] : []));
    if (tags.length === 0 ? options.untaggedAreMine : tags.every((tag) => sameOwner(tag, options.ownerTag))) mine.push(resource);
  }
  mine.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  for (const duplicate of mine.slice(1)) {
    log.warn('deactivating a duplicate trainer of this round', { resourceId: duplicate.id, kept: mine[0]!.id });
    await provider.deactivate(duplicate.id);
  }
  return mine[0]?.id;
}

/** The same owning workflow (its session tag or its reference tag), or the very tag. */
function sameOwner(tag: string, ownerTag: string): boolean {
  const owner = ownerOfTag(ownerTag);
  return tag === ownerTag || (owner !== undefined && ownerOfTag(tag) === owner);
}

/**
 * Tells the round the trainer's id the moment the create answered, before the (possibly long) wait for readiness:
 * the round lists it in its memo, where the reaper reads it. Best effort: the round records it again when
 * provisioning returns, and the reaper falls back to the owner tag.
 */
async function tellRoundCreated(resourceId: string): Promise<void> {
  const context = Context.current();
  const workflow = context.info.workflowExecution;
  if (!workflow) return;
  await context.client.workflow
    .getHandle(workflow.workflowId, workflow.runId)
    .signal(TRAINER_CREATED_SIGNAL, { resourceId })
    .catch((err: unknown) => log.warn('could not tell the round its trainer id', { resourceId, error: String(err) }));
}

/** One provisioning of a round (its activity, the same across retries; another for each new trainer the round takes). */
function provisioningId(): string {
  const info = Context.current().info;
  return `${info.workflowExecution?.runId ?? ''}/${info.activityId}`;
}

/** The round's workflow id: a retried attempt of the same round holds the gate it held. */
function gateOwner(ownerTag: string): string {
  return Context.current().info.workflowExecution?.workflowId ?? ownerTag;
}

function gateKey(provider: TrainingProvider, spec: RoundSpec): ProvisionGateKey {
  return { taskQueue: Context.current().info.taskQueue, provider: provider.kind, account: provider.account, model: spec.provider.model };
}

/** Outlasts a dead attempt's heartbeat timeout and the retry's first backoff, so a retry usually finds its lease. */
function gateLeaseSeconds(heartbeatTimeoutMs: number | undefined): number {
  return Math.min(3600, Math.max(30, Math.ceil((2 * (heartbeatTimeoutMs ?? 30_000)) / 1000)));
}

export type TrainerActivities = ReturnType<typeof createTrainerActivities>;

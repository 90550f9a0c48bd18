import { Context } from '@temporalio/activity';
import { RoundhouseFailure } from '../config/failures';
import { ProviderError } from '../providers/errors';
import type { TrainingProvider } from '../providers/types';
import type { RoundInput, RoundSpec } from '../workflows/round-contract';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { recordResource } from './metrics';

/**
 * The trainer's lifecycle: provisioned (an unanswered create is adopted by listing, never created twice), a training
 * session opened (fresh or from a checkpoint; an unanswered open is adopted by name), and released on every path.
 */
export interface ProvisionedTrainer {
  resourceId: string;
  /** When it was seen ready (ms since epoch). */
  readyAtMs: number;
}

export function createTrainerActivities(deps: ActivityDeps) {
  return {
    /**
     * Creates the trainer and waits until it is ready. The resources this account already had are recorded in
     * the first heartbeat, so an attempt that died after the create (its response unseen) finds and adopts the
     * new resource by listing instead of creating a second one.
     */
    async provisionTrainer(input: { spec: RoundSpec; ownerTag: string }): Promise<ProvisionedTrainer> {
      const provider = await deps.providerFor(input.spec.provider);
      const previous = Context.current().info.heartbeatDetails as { before?: string[]; resourceId?: string } | undefined;
      let resourceId = previous?.resourceId;
      return atBoundary(
        async () => {
          const before = previous?.before ?? (await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id);
          Context.current().heartbeat({ before, resourceId });
          if (!resourceId) {
            const adopted = previous?.before ? await adoptNewResource(provider, before, input.spec.provider.model) : undefined;
            if (adopted) {
              resourceId = adopted;
            } else {
              try {
                resourceId = (
                  await provider.provision({
                    model: input.spec.provider.model,
                    ownerTag: input.ownerTag,
                    generatorReplicas: input.spec.provider.generatorReplicas,
                    inactiveTimeoutSeconds: input.spec.provider.inactiveTimeoutSeconds,
                  })
                ).id;
              } catch (err) {
                if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
                resourceId = await adoptNewResource(provider, before, input.spec.provider.model);
                if (!resourceId) {
                  // The create did not happen after all: let Temporal retry it (the next attempt looks again first).
                  throw new RoundhouseFailure(
                    'ProvisionUnconfirmed',
                    'resource create outcome unknown and no new resource found; retrying',
                  );
                }
              }
            }
            Context.current().heartbeat({ before, resourceId });
          }
          const timer = setInterval(() => Context.current().heartbeat({ before, resourceId }), 1000);
          try {
            await provider.waitReady(resourceId, {
              timeoutMs: input.spec.advanced.provisionTimeoutMinutes * 60_000,
              signal: Context.current().cancellationSignal,
            });
          } catch (err) {
            // Cancelled or failed after the create: the workflow may never hear the id, so release it here.
            await provider.deactivate(resourceId).catch(() => undefined);
            throw err;
          } finally {
            clearInterval(timer);
          }
          recordResource('provisioned', { provider: input.spec.provider.kind });
          return { resourceId, readyAtMs: Date.now() };
        },
        () => ({ resourceId }),
      );
    },

    /** Opens the training session: fresh, or from a training checkpoint (with or without optimizer state). */
    async openTrainingSession(input: {
      spec: RoundSpec;
      resourceId: string;
      ownerTag: string;
      startFrom?: RoundInput['startFrom'];
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
              loraRank: input.spec.training.loraRank,
              loraAlpha: input.spec.training.loraAlpha,
              seed: input.spec.training.seed,
              fromCheckpoint: input.startFrom && { id: input.startFrom.checkpointId, loadOptimizer: input.startFrom.loadOptimizer },
              displayName,
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

    /** Releases the trainer; idempotent, and fine with a resource that already stopped or failed. */
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

    async releaseTrainer(input: {
      spec: RoundSpec;
      resourceId: string;
      sessionId?: string;
    }): Promise<{ status: string; resourceId: string }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        if (input.sessionId) await provider.closeSession(input.sessionId).catch(() => undefined);
        const r = await provider.deactivate(input.resourceId);
        recordResource('released', { provider: input.spec.provider.kind });
        return { status: r.state === 'failed' ? 'already-failed' : 'deactivated', resourceId: input.resourceId };
      });
    },
  };
}

/** A resource of this model that appeared since `before` was listed: the one an unanswered create made. */
async function adoptNewResource(provider: TrainingProvider, before: string[], model: string): Promise<string | undefined> {
  const known = new Set(before);
  const fresh = (await provider.listOwnedResources({ activeOnly: true })).filter((r) => !known.has(r.id) && r.model === model);
  return fresh.sort((a, b) => a.createdAt.localeCompare(b.createdAt))[0]?.id;
}

export type TrainerActivities = ReturnType<typeof createTrainerActivities>;

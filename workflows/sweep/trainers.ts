import { CancellationScope, condition, defineSignal, setHandler, upsertMemo, workflowInfo } from '@temporalio/workflow';
import { ownerTagFor } from '../../config/rules/owner-tag';
import { TRAINER_CREATED_SIGNAL, TRAINERS_MEMO, type RegisteredTrainer } from '../../config/rules/trainer-registry';
import { roundActivities, type RoundActivities } from '../round/activities';
import type { RoundBudget, RoundSpec } from '../round/contract';

/** A trainer the sweep holds for several arms: who is on it, and when it was ready and released (its billed time). */
interface SharedTrainer {
  resourceId: string;
  readyAtMs: number;
  releasedAtMs?: number;
  arms: number[];
}

/**
 * A sweep's shared trainers (several adapters for the price of one base model): where the dialect publishes how many
 * sessions a trainer takes, the arms are packed onto ⌈arms / per trainer⌉ trainers the sweep provisions, owns (its
 * tag, its memo: the reaper keeps them while the sweep lives) and releases when the last arm on each has ended, or
 * when every arm on it is paused. The sweep bills their time; each arm ends only its own sessions.
 */
export class SweepTrainers {
  readonly held: SharedTrainer[] = [];
  private readonly created = new Set<string>();
  private readonly activities: RoundActivities;
  pricePerHour: number | undefined;
  gpuCount = 1;

  constructor(private readonly spec: RoundSpec) {
    this.activities = roundActivities(spec.advanced.heartbeatTimeoutSeconds);
    // Provisioning tells the workflow that ran it the moment a create answers: released on every path from then on.
    setHandler(defineSignal<[{ resourceId: string }]>(TRAINER_CREATED_SIGNAL), ({ resourceId }) => this.register(resourceId));
  }

  /** Provisions the trainers the arms are packed on; false where the dialect says nothing of sessions per trainer. */
  async provision(arms: number[]): Promise<boolean> {
    const packing = await this.activities.checks.armsPerTrainer({ spec: this.spec });
    this.pricePerHour = packing.pricePerHour;
    this.gpuCount = packing.gpuCount;
    const per = packing.armsPerTrainer;
    if (!per || arms.length < 2) return false;
    const count = Math.ceil(arms.length / per);
    const ownerTag = ownerTagFor(workflowInfo().workflowId);
    const trainers = await Promise.all(
      Array.from({ length: count }, () => this.activities.provisioning.provisionTrainer({ spec: this.spec, ownerTag })),
    );
    trainers.forEach((t, i) => {
      this.register(t.resourceId);
      // Round-robin: the arms spread evenly over the trainers.
      this.held.push({ resourceId: t.resourceId, readyAtMs: t.readyAtMs, arms: arms.filter((_, k) => k % count === i) });
    });
    return true;
  }

  /** The trainer an arm's sessions go on, if packed. */
  of(arm: number): string | undefined {
    return this.held.find((t) => t.arms.includes(arm))?.resourceId;
  }

  /** Releases each trainer once every arm on it is done (or, `idle`, paused): watched until all are released. */
  async releaseWhenDone(done: (arm: number) => boolean): Promise<void> {
    await Promise.all(
      this.held.map(async (t) => {
        await condition(() => t.arms.every(done));
        await this.release(t);
      }),
    );
  }

  /** At the sweep's end, on every path: whatever is still held, and whatever a provisioning made and did not return. */
  async releaseAll(): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      for (const t of this.held) await this.release(t);
      for (const resourceId of this.created)
        if (!this.held.some((t) => t.resourceId === resourceId))
          await this.activities.cleanup.releaseTrainer({ spec: this.spec, resourceId });
    });
  }

  /** Held time so far, in ms, of every trainer (what the provider bills: per trainer, not per session). */
  heldMs(): number {
    return this.held.reduce((a, t) => a + Math.max(0, (t.releasedAtMs ?? Date.now()) - t.readyAtMs), 0);
  }

  /** Trainers held now (billing). */
  holding(): number {
    return this.held.filter((t) => t.releasedAtMs === undefined).length;
  }

  gpuMinutes(): number {
    return (this.heldMs() / 60_000) * this.gpuCount;
  }

  costUsd(): number | undefined {
    return this.pricePerHour === undefined ? undefined : (this.heldMs() / 3_600_000) * this.pricePerHour;
  }

  /**
   * The round's budget over the shared trainers: a timer stands for the moment the time they have held, and a reserve
   * for the arms to checkpoint and end their sessions (10 s), reaches `maxUsd` or `maxGpuMinutes`; then `exhaust`.
   */
  async watchBudget(budget: RoundBudget | undefined, exhaust: (reason: string) => void, over: () => boolean): Promise<void> {
    const reserveMs = 10_000;
    for (;;) {
      const rate = this.holding();
      if (rate === 0 || over()) return;
      const waits: { ms: number; reason: string }[] = [];
      if (budget?.maxUsd !== undefined && this.pricePerHour !== undefined)
        waits.push({
          ms: ((budget.maxUsd - this.costUsd()!) / (this.pricePerHour * rate)) * 3_600_000 - reserveMs,
          reason: 'dollar budget reached',
        });
      if (budget?.maxGpuMinutes !== undefined)
        waits.push({
          ms: ((budget.maxGpuMinutes - this.gpuMinutes()) / (this.gpuCount * rate)) * 60_000 - reserveMs,
          reason: 'GPU-minute budget reached',
        });
      if (!waits.length) return;
      const next = waits.sort((a, b) => a.ms - b.ms)[0]!;
      if (next.ms <= 0) return exhaust(next.reason);
      await condition(() => over() || this.holding() !== rate, Math.ceil(next.ms));
    }
  }

  private async release(t: SharedTrainer): Promise<void> {
    if (t.releasedAtMs !== undefined) return;
    await this.activities.cleanup.releaseTrainer({ spec: this.spec, resourceId: t.resourceId });
    t.releasedAtMs ??= Date.now();
    this.created.delete(t.resourceId);
    this.memo();
  }

  private register(resourceId: string): void {
    if (this.created.has(resourceId)) return;
    this.created.add(resourceId);
    this.memo();
  }

  /** The trainers the sweep holds, in its memo: where the reaper reads them if the sweep closes without releasing. */
  private memo(): void {
    const { kind, baseUrl } = this.spec.provider;
    const trainers: RegisteredTrainer[] = [...this.created].map((resourceId) => ({ resourceId, kind, ...(baseUrl ? { baseUrl } : {}) }));
    upsertMemo({ [TRAINERS_MEMO]: trainers });
  }
}

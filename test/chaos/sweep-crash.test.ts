import path from 'node:path';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import type { RoundProgress } from '../../workflows/round/contract';
import { campaignWorkflow } from '../../workflows';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { progressOf } from '../helpers/round';
import { TRAINING_ACTIVITY } from '../helpers/running-activities';
import { testReportDir } from '../helpers/artifacts';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, KillSequence, startWorkerProcess } from '../helpers/worker-process';

// A packed sweep (4 arms side by side on one shared trainer, successive halving at every 4 steps) under SIGKILLs of the
// real worker process: inside an arm's training segment, and right at a rung decision (made, its stopped arms not yet
// ended). Every arm keeps its exact steps, each stopped arm's session ends, each decision is made and told once, and
// the emulator's ledger bills no more than the budget.

let temporal: TestTemporal;
let bundleFile: string;
let emulator: RunningEmulator;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
  // GPU time at $36 per GPU-hour (a cent a second), steps of some tens of ms, a trainer ready in half a second.
  emulator = await startTestEmulator({ provisioningDelayMs: 500, operationLatencyMs: 80, prices: { gpuHour: 36 } });
});

afterAll(async () => {
  await emulator?.close();
  await temporal?.close();
});

test('a packed sweep, SIGKILLed inside an arm’s training and at a rung decision: exact steps per arm, stopped arms’ sessions ended, each decision once, the ledger within maxUsd', async () => {
  const taskQueue = uniqueTaskQueue('crash-sweep');
  const campaignId = `crash-sweep-${taskQueue}`;
  const maxUsd = 3;
  // 80 rows in batches of 10, 2 epochs: 16 steps; rungs at 4, 8 and 12 (4 arms → 2 → 1 → 1).
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 80,
    evalRows: 10,
    yaml: `rounds: { max: 1 }
budget: { maxUsd: ${maxUsd} }
sweep:
  over: { training.learningRate: [0.0005, 0.002, 0.008, 0.03] }
  select: { metric: eval_loss, rungs: 4, eta: 2 }`,
  });
  spec.advanced.heartbeatTimeoutSeconds = 2;
  const env = crashTestWorkerEnv(taskQueue, bundleFile);
  const startedAt = Date.now();
  const log = (line: string) => process.stderr.write(`[crash sweep +${((Date.now() - startedAt) / 1000).toFixed(1)} s] ${line}\n`);
  const sequence = new KillSequence(startWorkerProcess(env), env, log);
  try {
    await sequence.worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(path.join(dir, 'reports')) } satisfies CampaignInput],
    });
    const sweep = temporal.client.workflow.getHandle(`${campaignId}-round-1`);
    const arm1 = temporal.client.workflow.getHandle(`${campaignId}-round-1-arm-1`);
    const ended = ['completed', 'failed', 'cancelled', 'stopped', 'cleanup'];

    // Mid-rung: inside arm 1's first training segment (before its first rung).
    await sequence.at<RoundProgress>(
      { name: 'arm 1 inside a training segment', when: (p) => p.phase === 'training', inside: { activity: TRAINING_ACTIVITY } },
      {
        progress: () => progressOf(arm1),
        workflow: arm1,
        describe: (p) => `arm 1 phase ${p.phase}, step ${p.step}`,
        beyond: (p) => p.step >= 4 || ended.includes(p.phase),
        jitterMs: () => 40, // land inside a step
      },
    );
    // At a rung decision: the first one made, an arm it stopped not yet ended.
    await sequence.at<RoundProgress>(
      {
        name: 'rung 1 decided, its stopped arms still ending',
        when: (p) =>
          (p.sweep?.decisions.length ?? 0) >= 1 &&
          p.sweep!.decisions[0]!.stopped.some((arm) => p.sweep!.arms.find((a) => a.arm === arm)?.status === 'running'),
      },
      {
        progress: () => progressOf(sweep),
        describe: (p) => `sweep: ${p.sweep?.decisions.length ?? 0} decisions, arms ${p.sweep?.arms.map((a) => a.status).join(',')}`,
        beyond: (p) =>
          (p.sweep?.decisions.length ?? 0) >= 1 &&
          p.sweep!.decisions[0]!.stopped.every((arm) => p.sweep!.arms.find((a) => a.arm === arm)?.status !== 'running'),
      },
    );
    const result: CampaignResult = await handle.result();
    log(`campaign done; ${sequence.kills.length} kills: ${sequence.kills.join('; ')}`);
    expect(sequence.missed).toEqual([]);
    expect(result.status).toBe('completed');
    const record = result.rounds[0]!.sweep!;
    expect(record.decisions.map((d) => [d.rung, d.figures.length, d.kept.length])).toEqual([
      [1, 4, 2],
      [2, 2, 1],
      [3, 1, 1],
    ]);
    expect(record.trainers).toHaveLength(1);

    // Each decision told once: one armDecision signal per arm measured at a rung, in the sweep's history.
    const told = (await sweep.fetchHistory()).events!.filter(
      (e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === 'armDecision',
    );
    expect(told).toHaveLength(record.decisions.reduce((n, d) => n + d.figures.length, 0));

    // Exact steps per arm on its sessions (every lineage), the stopped arms' sessions ended, nothing active.
    const l = await ledger(emulator);
    for (const arm of record.arms) {
      const sessions = l.sessions.filter((s) => s.displayName === `roundhouse:${arm.workflowId}`);
      expect(sessions.reduce((n, s) => n + s.optimizerSteps, 0)).toBe(arm.step);
      expect(sessions.every((s) => s.status !== 'RUNNING')).toBe(true);
      if (arm.arm !== record.winner!.arm) expect(arm.step).toBe(4 * arm.stoppedAtRung!);
    }
    expect(record.arms.find((a) => a.arm === record.winner!.arm)!.step).toBe(16);
    const shared = l.resources.find((r) => r.id === record.trainers![0]!.resourceId)!;
    expect(l.active).toEqual([]);
    expect(shared.usd).toBeGreaterThan(0);
    expect(shared.usd).toBeLessThanOrEqual(maxUsd);
    log(
      `winner arm ${record.winner!.arm}; shared trainer ${shared.gpuSeconds} GPU-s, $${shared.usd}; sweep cost $${result.rounds[0]!.costUsd?.toFixed(4)}`,
    );
  } finally {
    await sequence.worker.kill();
  }
}, 300_000);

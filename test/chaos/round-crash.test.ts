import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { seededRandom } from '../../config/random';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { RoundProgress, RoundResult } from '../../workflows/round-contract';
import { firedFaults, ledger, setFaults, startTestEmulator, tenPercentFaults, type RunningEmulator } from '../helpers/emulator';
import { progressOf, ticketRoundInput } from '../helpers/round';
import { ticketCampaignSpec } from '../helpers/campaign';
import { campaignProgressQuery, type CampaignInput, type CampaignResult } from '../../workflows/campaign-contract';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import {
  bundleToFile,
  crashTestWorkerEnv,
  killAtPoints,
  startWorkerProcess,
  type KillPoint,
  type WorkerProcess,
} from '../helpers/worker-process';
import { campaignWorkflow, roundWorkflow } from '../../workflows';

let temporal: TestTemporal;
let bundleFile: string;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
});

afterAll(async () => {
  await temporal?.close();
});

const crashWorkerEnv = (taskQueue: string) => crashTestWorkerEnv(taskQueue, bundleFile);

test('SIGKILL of the worker at every phase boundary and inside training: a fresh worker finishes with exactly the planned steps and nothing left active', async () => {
  const emulator: RunningEmulator = await startTestEmulator({ provisioningDelayMs: 1500, operationLatencyMs: 60 });
  // Each late phase is slow enough (its first request waits) to be caught and killed in.
  await setFaults(emulator, {
    rules: ['forward-backward', 'training-checkpoint', 'weights-sync', 'sample'].map((op) => ({
      kind: 'delay',
      method: 'POST',
      path: `/operations/${op}$`,
      delayMs: 1500,
      max: op === 'forward-backward' ? 0 : 3,
    })),
  });
  const taskQueue = uniqueTaskQueue('crash');
  const input = ticketRoundInput({
    baseUrl: emulator.url,
    campaignId: `crash-${taskQueue}`,
    trainRows: 64,
    evalRows: 8,
    heartbeatTimeoutSeconds: 2,
    overrides: '',
  });
  input.spec.training.epochs = 3; // 64 / 8 × 3 = 24 steps in segments of 4
  const env = crashWorkerEnv(taskQueue);
  const random = seededRandom(20261129); // seeded, so a failing run can be replayed
  const killPoints: KillPoint<RoundProgress>[] = [
    { name: 'provisioning', when: (p) => p.phase === 'provisioning' },
    { name: 'baseline', when: (p) => p.phase === 'baseline' },
    ...[1, 5, 9, 13, 17].map((s) => ({ name: `training ≥ step ${s}`, when: (p: RoundProgress) => p.phase === 'training' && p.step >= s })),
    { name: 'checkpointing', when: (p) => p.phase === 'checkpointing' },
    { name: 'checkpointing again', when: (p) => p.phase === 'checkpointing' },
    { name: 'sampling', when: (p) => p.phase === 'sampling' },
    { name: 'sampling again', when: (p) => p.phase === 'sampling' },
  ];

  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    const killed = await killAtPoints({
      points: killPoints,
      progress: () => progressOf(handle),
      worker,
      env,
      describe: (p) => `phase ${p.phase}, step ${p.step}`,
      beyond: (p) => ['completed', 'failed', 'cancelled', 'cleanup'].includes(p.phase),
      jitterMs: (p) => (p.phase === 'training' ? Math.floor(random() * 300) : 0), // land inside the segment
    });
    worker = killed.worker;
    const kills = killed.kills;
    const result: RoundResult = await handle.result();
    process.stderr.write(`[crash] ${kills.length} kills: ${kills.join('; ')}\n`);
    expect(kills.length).toBeGreaterThanOrEqual(10);
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 24, totalSteps: 24 });

    const l = await ledger(emulator);
    expect(l.resources).toHaveLength(1); // provisioned once, whatever was killed
    expect(l.totals.optimizerSteps).toBe(24); // none lost, none doubled
    expect(l.active).toEqual([]);
    process.stderr.write(`[crash] duplicates absorbed by idempotency keys: ${l.totals.duplicatesAbsorbed}\n`);
    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 24 }, (_v, i) => i + 1));
  } finally {
    await worker.stop();
    await emulator.close();
  }
}, 300_000);

test('with 429/5xx/resets/lost responses injected at 10% the round completes with the exact step count', async () => {
  const emulator = await startTestEmulator({ provisioningDelayMs: 100 });
  const providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-faults-')) });
  try {
    await setFaults(emulator, tenPercentFaults(11));
    const taskQueue = uniqueTaskQueue('faults');
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `faults-${taskQueue}`, trainRows: 48, evalRows: 8 });
    const worker = await createRoundhouseWorker({
      connection: temporal.nativeConnection,
      namespace: temporal.settings.namespace,
      taskQueue,
      workflowBundle: { codePath: bundleFile },
      providers,
    });
    const result: RoundResult = await worker.runUntil(
      temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] }),
    );
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 12 });
    const fired = await firedFaults(emulator);
    process.stderr.write(`[faults] injected: ${fired.summary}\n`);
    expect(fired.total).toBeGreaterThan(10);
    await setFaults(emulator, {});
    const l = await ledger(emulator);
    expect(l.totals.optimizerSteps).toBe(12);
    expect(l.active).toEqual([]);
    expect(l.resources).toHaveLength(1);
  } finally {
    await providers.close();
    await emulator.close();
  }
}, 300_000);

test('SIGKILL of the worker between rounds and around continue-as-new: the campaign resumes without a duplicated round', async () => {
  const emulator = await startTestEmulator({ provisioningDelayMs: 300, operationLatencyMs: 10 });
  const taskQueue = uniqueTaskQueue('crash-campaign');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 40,
    evalRows: 5,
    yaml: 'rounds: { max: 3, nextData: { policy: all } }',
  });
  const campaignId = `crash-campaign-${taskQueue}`;
  const env = crashWorkerEnv(taskQueue);
  let worker = startWorkerProcess(env);
  const kills: string[] = [];
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: dir } satisfies CampaignInput],
    });
    // Kill as each round finishes (before the campaign records it and continues as new), and right after.
    for (const point of [1, 2]) {
      for (const moment of ['round finishing', 'new run']) {
        const deadline = Date.now() + 90_000;
        let hit = false;
        while (!hit && Date.now() < deadline) {
          const p = await handle.query(campaignProgressQuery).catch(() => undefined);
          if (moment === 'round finishing')
            hit = p?.currentRound?.round === point && ['evaluating', 'cleanup', 'completed'].includes(p.currentRound.phase);
          else hit = (p?.rounds.length ?? 0) >= point;
          if (!hit) await new Promise((r) => setTimeout(r, 20));
        }
        if (!hit) continue;
        await worker.kill();
        kills.push(`${moment} ${point}`);
        worker = startWorkerProcess(env);
        await worker.ready;
      }
    }
    const result: CampaignResult = await handle.result();
    process.stderr.write(`[crash] campaign kills: ${kills.join('; ')}\n`);
    expect(kills.length).toBeGreaterThanOrEqual(3);
    expect(result.rounds.map((r) => [r.round, r.status])).toEqual([
      [1, 'completed'],
      [2, 'completed'],
      [3, 'completed'],
    ]);
    const rounds: string[] = [];
    for await (const w of temporal.client.workflow.list({ query: `WorkflowType = 'roundWorkflow' AND TaskQueue = '${taskQueue}'` }))
      rounds.push(w.workflowId);
    expect(rounds.sort()).toEqual([1, 2, 3].map((n) => `${campaignId}-round-${n}`)); // one of each, never two
    const l = await ledger(emulator);
    expect(l.resources).toHaveLength(3);
    expect(l.totals.optimizerSteps).toBe(result.rounds.reduce((a, r) => a + r.totalSteps, 0));
    expect(l.active).toEqual([]);
  } finally {
    await worker.stop();
    await emulator.close();
  }
}, 300_000);

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { seededRandom } from '../../config/rules/random';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { RoundProgress, RoundResult } from '../../workflows/round/contract';
import { firedFaults, ledger, setFaults, startTestEmulator, tenPercentFaults, type RunningEmulator } from '../helpers/emulator';
import { progressOf, ticketRoundInput } from '../helpers/round';
import { ticketCampaignSpec } from '../helpers/campaign';
import { campaignProgressQuery, type CampaignInput, type CampaignResult } from '../../workflows/campaign/contract';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import {
  bundleToFile,
  crashTestWorkerEnv,
  killAtPoints,
  startWorkerProcess,
  type KillPoint,
  type WorkerProcess,
} from '../helpers/worker-process';
import { TRAINING_ACTIVITY } from '../helpers/running-activities';
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
  // Each phase off training is slow enough (its first requests wait) to be caught and killed in: the baseline's
  // forward is the round's first forward-backward.
  await setFaults(emulator, {
    rules: ['forward-backward', 'training-checkpoint', 'weights-sync', 'sample'].map((op) => ({
      kind: 'delay',
      method: 'POST',
      path: `/operations/${op}$`,
      delayMs: 1500,
      max: op === 'forward-backward' ? 1 : 3,
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
  // Each kill must land inside a running attempt of the phase's activity on the killed worker (a training kill: with
  // the segment's heartbeat at the step), proven afterwards by the attempt that followed it; none may be skipped.
  const inPhase = (name: string, phase: RoundProgress['phase'], activity: RegExp): KillPoint<RoundProgress> => ({
    name,
    when: (p) => p.phase === phase,
    inside: { activity },
  });
  const killPoints: KillPoint<RoundProgress>[] = [
    inPhase('provisioning', 'provisioning', /^provisionTrainer$/),
    inPhase('baseline', 'baseline', /^measureLoss$/),
    // A segment's heartbeat reaches the server at most every 1.6 s, so each point is one a segment starts at (or, the
    // first, just after): a kill lands in each of the first five segments.
    ...[1, 4, 8, 12, 16].map((s) => ({
      name: `training ≥ step ${s}`,
      when: (p: RoundProgress) => p.phase === 'training',
      inside: { activity: TRAINING_ACTIVITY, fromStep: s },
    })),
    inPhase('checkpointing', 'checkpointing', /^saveTrainingCheckpoint$/),
    inPhase('checkpointing again', 'checkpointing', /^saveTrainingCheckpoint$/),
    inPhase('sampling', 'sampling', /^sampleAndScore$/),
    inPhase('sampling again', 'sampling', /^sampleAndScore$/),
  ];

  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    const killed = await killAtPoints({
      points: killPoints,
      progress: () => progressOf(handle),
      workflow: handle,
      worker,
      env,
      describe: (p) => `phase ${p.phase}, step ${p.step}`,
      beyond: (p) => ['completed', 'failed', 'cancelled', 'cleanup'].includes(p.phase),
      jitterMs: (p) => (p.phase === 'training' ? Math.floor(random() * 300) : 0), // land inside the segment
      log: (line) => process.stderr.write(`[crash] ${line}\n`),
    });
    worker = killed.worker;
    const kills = killed.kills;
    const result: RoundResult = await handle.result();
    process.stderr.write(`[crash] ${kills.length} kills: ${kills.join('; ')}\n`);
    expect(killed.missed).toEqual([]);
    expect(killed.outcomes.filter((o) => TRAINING_ACTIVITY.test(o.activity?.type ?? ''))).toHaveLength(5);
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 24, totalSteps: 24 });
    // A killed worker's segment is resumed from its heartbeat by the next attempt, not rolled back.
    expect(result.recoveries).toBeUndefined();

    const l = await ledger(emulator);
    expect(l.resources).toHaveLength(1); // provisioned once, whatever was killed
    expect(l.totals.optimizerSteps).toBe(24); // none lost, none doubled: no step redone
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
    // 24 rows, 6 steps in two segments: well over ten faults meet the round (twice the rows only meet more of the same).
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `faults-${taskQueue}`, trainRows: 24, evalRows: 8 });
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
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 6, totalSteps: 6 });
    const fired = await firedFaults(emulator);
    process.stderr.write(`[faults] injected: ${fired.summary}\n`);
    expect(fired.total).toBeGreaterThan(10);
    await setFaults(emulator, {});
    const l = await ledger(emulator);
    expect(l.totals.optimizerSteps).toBe(6);
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
  const missed: string[] = [];
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
        if (!hit) {
          missed.push(`${moment} ${point}`);
          continue;
        }
        await worker.kill();
        kills.push(`${moment} ${point}`);
        worker = startWorkerProcess(env);
        await worker.ready;
      }
    }
    const result: CampaignResult = await handle.result();
    process.stderr.write(`[crash] campaign kills: ${kills.join('; ')}; missed: ${missed.join('; ') || 'none'}\n`);
    expect(missed).toEqual([]);
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

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { seededRandom } from '../../config/rules/random';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { RoundProgress, RoundResult } from '../../workflows/round/contract';
import { roundWorkflow } from '../../workflows';
import { firedFaults, ledger, setFaults, startTestEmulator, tenPercentFaults, type RunningEmulator } from '../helpers/emulator';
import { progressOf, ticketRoundInput } from '../helpers/round';
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

// A Tinker round under the crashes and transport faults the other dialects' rounds take. Tinker says nowhere where a
// model's operation order stands, so a worker that did not make a model never sends to it: a kill inside training
// rolls the round back to its latest checkpoint on a new model (the same Tinker session), exactly as after a lost
// trainer. What must hold: the kept weights hold exactly the planned steps, none empty, and nothing is left loaded.

let temporal: TestTemporal;
let bundleFile: string;
const TINKER_KEY = 'tml-crash-test-key';

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
});

afterAll(async () => {
  await temporal?.close();
});

function tinkerRoundInput(emulator: RunningEmulator, campaignId: string, trainRows: number) {
  const input = ticketRoundInput({
    baseUrl: emulator.url,
    campaignId,
    trainRows,
    evalRows: 8,
    heartbeatTimeoutSeconds: 2,
  });
  input.spec.advanced.maxRecoveries = 20; // every kill inside training is one
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: emulator.url };
  input.spec.training.checkpointEvery = { steps: 4, keep: 3 };
  return input;
}

test('Tinker: SIGKILL of the worker in baseline, inside training, checkpointing and sampling: one rollback per kill, exactly the planned steps in the kept weights, redone steps bounded, nothing left loaded', async () => {
  const emulator = await startTestEmulator({ operationLatencyMs: 60 });
  // The baseline and the late phases are slow enough (their requests wait) to be caught and killed in, on a loaded
  // machine too: the baseline's first loss pass (a forward-only forward_backward) waits, as the late phases' requests
  // do. Rolling checkpoints in training also call save_weights, so the round's final checkpoint is slow only if more
  // than the first save waits.
  await setFaults(emulator, {
    rules: [
      { route: 'forward_backward', max: 1 },
      { route: 'save_weights', max: 8 },
      { route: 'save_weights_for_sampler', max: 3 },
      { route: 'asample', max: 3 },
    ].map(({ route, max }) => ({ kind: 'delay', method: 'POST', path: `/api/v1/${route}$`, delayMs: 1500, max })),
  });
  const taskQueue = uniqueTaskQueue('crash-tinker');
  const input = tinkerRoundInput(emulator, `crash-tinker-${taskQueue}`, 64);
  input.spec.training.epochs = 2; // 64 / 8 × 2 = 16 steps
  const { segmentSteps } = input.spec.training;
  const env = { ...crashTestWorkerEnv(taskQueue, bundleFile), TINKER_API_KEY: TINKER_KEY };
  const random = seededRandom(20261202);
  // Each kill must land inside a running attempt of the phase's activity on the killed worker (a training kill: with
  // the segment's heartbeat at the step), proven afterwards by the attempt that followed it; none may be skipped.
  const killPoints: KillPoint<RoundProgress>[] = [
    { name: 'baseline', when: (p) => p.phase === 'baseline', inside: { activity: /^measureLoss$/ } },
    ...[2, 8].map((s) => ({
      name: `training ≥ step ${s}`,
      when: (p: RoundProgress) => p.phase === 'training',
      inside: { activity: TRAINING_ACTIVITY, fromStep: s },
    })),
    { name: 'checkpointing', when: (p) => p.phase === 'checkpointing', inside: { activity: /^saveTrainingCheckpoint$/ } },
    { name: 'sampling', when: (p) => p.phase === 'sampling', inside: { activity: /^sampleAndScore$/ } },
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
      jitterMs: (p) => (p.phase === 'training' ? Math.floor(random() * 300) : 0),
      perPointMs: 60_000,
      log: (line) => process.stderr.write(`[crash tinker] ${line}\n`),
    });
    worker = killed.worker;
    const result: RoundResult = await handle.result();
    process.stderr.write(`[crash tinker] ${killed.kills.length} kills: ${killed.kills.join('; ')}\n`);
    expect(killed.missed).toEqual([]);
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 16, totalSteps: 16, gpuMinutes: 0 });
    // Only the process that made a model drives it, so every kill costs the round one rollback, in the phase killed.
    expect(result.recoveries?.map((r) => r.phase)).toEqual(['baseline', 'training', 'training', 'checkpointing', 'evaluation']);

    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 16 }, (_v, i) => i + 1));
    const l = await ledger(emulator);
    // The model behind the final checkpoint holds exactly the planned steps; no step of its lineage was empty.
    const kept = l.sessions.find((s) => s.id === report.session_id)!;
    expect(kept.step).toBe(16);
    expect(kept.lineageEmptyOptimizerSteps).toBe(0);
    expect(l.active).toEqual([]); // every model unloaded with its finished session
    expect(l.totals.gpuSeconds).toBe(0);
    // Redone steps: those a killed model applied past the checkpoint the round rolled back to. A training kill found
    // its segment's heartbeat at step h and rolled back to b: the dead model had applied at least h and at most
    // h + segmentSteps (a segment never passes its end). The final checkpoint's kill redoes its rollback exactly;
    // the baseline's and sampling's redo none.
    const redone = l.totals.optimizerSteps - 16;
    const trainingKills = killed.outcomes.filter((o) => TRAINING_ACTIVITY.test(o.activity?.type ?? ''));
    const trainingRollbacks = result.recoveries!.filter((r) => r.phase === 'training');
    const checkpointRollback = result.recoveries!.find((r) => r.phase === 'checkpointing')!.stepsRolledBack;
    const least = trainingKills.reduce(
      (a, o, i) => a + o.activity!.heartbeatStep! - trainingRollbacks[i]!.rolledBackTo,
      checkpointRollback,
    );
    process.stderr.write(
      `[crash tinker] ${l.sessions.length} models, ${l.totals.optimizerSteps} optimizer steps for 16 planned: ${redone} redone (bounds ${least}..${
        least + trainingKills.length * segmentSteps
      }); rollbacks ${JSON.stringify(result.recoveries!.map((r) => [r.phase, r.failedAtStep, r.rolledBackTo]))}\n`,
    );
    expect(trainingKills).toHaveLength(2);
    expect(redone).toBeGreaterThanOrEqual(least);
    expect(redone).toBeLessThanOrEqual(least + trainingKills.length * segmentSteps);
  } finally {
    await worker.stop();
    await emulator.close();
  }
}, 300_000);

test('Tinker: with 429/5xx/resets/lost responses injected at 10% the round completes with the exact step count', async () => {
  const emulator = await startTestEmulator();
  const providers = new ProviderRegistry({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-faults-')),
    env: { ...process.env, TINKER_API_KEY: TINKER_KEY },
  });
  try {
    await setFaults(emulator, tenPercentFaults(14));
    const taskQueue = uniqueTaskQueue('faults-tinker');
    // 24 rows, 6 steps in two segments: well over ten faults meet the round (twice the rows only meet more of the same).
    const input = tinkerRoundInput(emulator, `faults-tinker-${taskQueue}`, 24);
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
    process.stderr.write(`[faults tinker] injected: ${fired.summary}; recoveries: ${result.recoveries?.length ?? 0}\n`);
    expect(fired.total).toBeGreaterThan(10);
    await setFaults(emulator, {});
    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    const l = await ledger(emulator);
    expect(l.sessions.find((s) => s.id === report.session_id)!.step).toBe(6);
    expect(l.active).toEqual([]);
  } finally {
    await providers.close();
    await emulator.close();
  }
}, 300_000);

test('Tinker on a self-hosted (SkyRL) server: SIGKILL of the worker inside training; the new worker, which cannot find the dead one’s model, unloads it by the id the round recorded and reopens from the rolling checkpoint: exact steps, nothing left loaded', async () => {
  const emulator = await startTestEmulator({ operationLatencyMs: 60, tinkerFlavor: 'skyrl', tinkerSessionTtlMs: 300_000 });
  const taskQueue = uniqueTaskQueue('crash-skyrl');
  const input = tinkerRoundInput(emulator, `crash-skyrl-${taskQueue}`, 48); // 48 / 8 = 6 steps an epoch, 12 in all
  // SkyRL checks no key: not a `tml-` one.
  const env = { ...crashTestWorkerEnv(taskQueue, bundleFile), TINKER_API_KEY: 'skyrl-crash-test-key' };
  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    const killed = await killAtPoints({
      points: [{ name: 'training ≥ step 5', when: (p) => p.phase === 'training', inside: { activity: TRAINING_ACTIVITY, fromStep: 5 } }],
      progress: () => progressOf(handle),
      workflow: handle,
      worker,
      env,
      describe: (p) => `phase ${p.phase}, step ${p.step}`,
      beyond: (p) => ['checkpointing', 'sampling', 'evaluating', 'cleanup', 'completed', 'failed', 'cancelled'].includes(p.phase),
      perPointMs: 60_000,
      log: (line) => process.stderr.write(`[crash skyrl] ${line}\n`),
    });
    worker = killed.worker;
    const result: RoundResult = await handle.result();
    expect(killed.missed).toEqual([]);
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 12, totalSteps: 12 });
    const rollback = result.recoveries!.find((r) => r.phase === 'training')!;
    expect(rollback.rolledBackTo).toBeGreaterThan(0); // the rolling checkpoint, loaded as a new model's first request
    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 12 }, (_v, i) => i + 1));
    const l = await ledger(emulator);
    const kept = l.sessions.find((s) => s.id === report.session_id)!;
    expect(kept).toMatchObject({ step: 12, lineageEmptyOptimizerSteps: 0 });
    // No session expiry in this run: the dead worker's model was unloaded by its recorded id, the rest at release.
    expect(l.active).toEqual([]);
  } finally {
    await worker.stop();
    await emulator.close();
  }
}, 300_000);

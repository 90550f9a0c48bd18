import { execFileSync } from 'node:child_process';
import path from 'node:path';
import fs from 'node:fs';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { arithmeticRoundInput, ticketRoundInput } from '../helpers/round';
import { readArtifact } from '../helpers/artifacts';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import type { WorkerProcess } from '../helpers/worker-process';
import { buildDist, startDistWorker, trainingWorkerPid, waitFor } from './helpers';
import { roundWorkflow } from '../../workflows';

let temporal: TestTemporal;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  buildDist();
}, 180_000);

afterAll(async () => {
  await temporal?.close();
});

const GRACE_MS = 8_000;

/**
 * Two compiled workers on one task queue run a 24-step round (SFT: segments of 4, 50 ms per operation; GRPO: one
 * segment, 100 ms per operation); once training passes step 5, the worker running the segment gets `signal`. The
 * other worker must finish the round.
 */
async function roundSurvivesLosingItsWorker(signal: 'SIGKILL' | 'SIGTERM', kind: 'sft' | 'grpo' = 'sft') {
  // An SFT segment is shorter than the grace at either latency; GRPO's one segment must outlast it (see below).
  const operationLatencyMs = kind === 'grpo' ? 100 : 50;
  const emulator: RunningEmulator = await startTestEmulator({ provisioningDelayMs: 200, operationLatencyMs });
  const taskQueue = uniqueTaskQueue(`failover-${signal.toLowerCase()}`);
  const env = {
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: '500',
    ROUNDHOUSE_SHUTDOWN_GRACE_MS: String(GRACE_MS),
  };
  const workers: WorkerProcess[] = [startDistWorker(env), startDistWorker(env)];
  try {
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) expect(w.output()).not.toContain('Workflow bundle created'); // the prebuilt bundle, no webpack
    const input =
      kind === 'sft'
        ? ticketRoundInput({
            baseUrl: emulator.url,
            campaignId: `failover-${taskQueue}`,
            trainRows: 64,
            evalRows: 8,
            heartbeatTimeoutSeconds: 2,
          })
        : arithmeticRoundInput({
            baseUrl: emulator.url,
            campaignId: `failover-${taskQueue}`,
            // One segment for the whole round (~11 s, longer than the grace): only draining lets the worker exit in time.
            yaml: `training: { epochs: 3, batchSize: 10, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 1000, segmentSeconds: 600 }
sampling: { maxTokens: 3, temperature: 1 }
advanced: { heartbeatTimeoutSeconds: 2 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric } } }`,
          });
    if (kind === 'sft') input.spec.training.epochs = 3; // 64 / 8 × 3 = 24 steps; grpo: 80 / 10 × 3 = 24
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });

    // Steps as the trainer counts them (live, unlike the round's progress, which moves at segment ends).
    const trainerSteps = async () => (await ledger(emulator)).totals.optimizerSteps;
    const atSignal = {
      step: await waitFor('training past step 5', async () => {
        const steps = await trainerSteps();
        return steps >= 5 ? steps : undefined;
      }),
    };
    const pid = await waitFor('the segment to be on a worker', () => trainingWorkerPid(handle));
    const victim = workers.find((w) => w.child.pid === pid);
    const survivor = workers.find((w) => w.child.pid !== pid)!;
    expect(victim).toBeDefined();

    const signalledAt = Date.now();
    const exited = new Promise<{ code: number | null; ms: number }>((resolve) =>
      victim!.child.once('exit', (code) => resolve({ code, ms: Date.now() - signalledAt })),
    );
    victim!.child.kill(signal);
    const exit = await exited;
    const resumed = await waitFor(
      'training to move on',
      async () => {
        return (await trainerSteps()) > atSignal.step + 4 ? Date.now() - signalledAt : undefined;
      },
      60_000,
    );

    const result: RoundResult = await handle.result();
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 24, totalSteps: 24 });
    const l = await ledger(emulator);
    expect(l.totals.optimizerSteps).toBe(24); // none lost, none doubled
    expect(l.resources).toHaveLength(1);
    expect(l.active).toEqual([]);
    const report = await readArtifact(result.reportPath);
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 24 }, (_v, i) => i + 1));
    expect(survivor.child.exitCode).toBeNull(); // the other worker finished it
    process.stderr.write(
      `[failover] ${kind} ${signal} at step ${atSignal.step}: worker exited in ${exit.ms} ms (code ${exit.code}), training moved on after ${resumed} ms; ` +
        `duplicates absorbed ${l.totals.duplicatesAbsorbed}\n`,
    );
    return { exit, victim: victim!, resumedMs: resumed };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await emulator.close();
  }
}

test('two workers on one queue: SIGKILL of the one training, the other finishes the round with exact steps and nothing left active', async () => {
  const { exit } = await roundSurvivesLosingItsWorker('SIGKILL');
  expect(exit.code).toBeNull(); // killed, not exited
}, 240_000);

test('SIGTERM during training: the worker drains and exits within its grace time, the round resumes on the other worker with no step lost or doubled', async () => {
  const { exit, victim } = await roundSurvivesLosingItsWorker('SIGTERM');
  expect(exit.code).toBe(0);
  expect(exit.ms).toBeLessThan(GRACE_MS);
  expect(victim.output()).toContain('shutdown requested');
  expect(victim.output()).toContain('worker stopped');
}, 240_000);

test('SIGTERM during a GRPO round: the worker drains (no new step) and exits within its grace time, the other finishes with exact steps', async () => {
  const { exit } = await roundSurvivesLosingItsWorker('SIGTERM', 'grpo');
  expect(exit.code).toBe(0);
  expect(exit.ms).toBeLessThan(GRACE_MS);
}, 240_000);

test('the compiled CLI and worker load neither tsx nor @temporalio/testing (only a dev-server start does), and package.json says so', () => {
  const root = path.resolve(__dirname, '../..');
  const loaded = execFileSync(
    process.execPath,
    [
      '-e',
      "require('./dist/cli/main.js'); require('./dist/workers/worker.js'); console.log(JSON.stringify(Object.keys(require.cache).filter((f) => /node_modules[\\\\/](tsx|@temporalio[\\\\/]testing)[\\\\/]/.test(f))))",
    ],
    { cwd: root, encoding: 'utf8' },
  );
  expect(JSON.parse(loaded)).toEqual([]);
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
    engines: { node: string };
  };
  expect(pkg.dependencies.tsx).toBeUndefined();
  expect(pkg.devDependencies.tsx).toBeDefined();
  // undici 7 needs Node ≥ 20.18.1.
  expect(pkg.engines.node).toBe('>=20.18.1');
});

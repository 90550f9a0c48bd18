import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  roundProgressQuery,
  type RoundProgress,
  type RoundResult,
} from '../../workflows/round/contract';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { ticketRoundInput } from '../helpers/round';
import { readArtifact } from '../helpers/artifacts';
import { joinLocation } from '../../config/io/artifacts';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { roundWorkflow } from '../../workflows';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;
const completedHistories: { workflowId: string; history: unknown }[] = [];

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 200 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-providers-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

async function withWorker<T>(taskQueue: string, body: () => Promise<T>): Promise<T> {
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  return worker.runUntil(body());
}

function readReport(result: { reportPath: string }): Promise<Record<string, any>> {
  return readArtifact(result.reportPath);
}

test('a round on the support-ticket example trains (trained < baseline), scores, releases the GPU and reports', async () => {
  const taskQueue = uniqueTaskQueue('round');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `tickets-${taskQueue}`, trainRows: 48, evalRows: 10 });
  const workflowId = `round-${taskQueue}`;
  const result: RoundResult = await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId, args: [input] });
    return handle.result();
  });

  expect(result.status).toBe('completed');
  expect(result.totalSteps).toBe(12); // 48 rows / batch 8 × 2 epochs
  expect(result.stepsApplied).toBe(12);
  expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);

  const report = await readReport(result);
  expect(report).toMatchObject({
    status: 'completed',
    error_type: null,
    cleanup_status: 'deactivated',
    steps_applied: 12,
    steps_planned: 12,
    train_sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    eval_sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    training_checkpoint_id: expect.any(String),
    sampler_checkpoint_id: expect.any(String),
  });
  expect(report.deactivated_ids).toEqual([report.resource_id]);
  expect(report.evaluations).toHaveLength(10);
  expect(report.evaluations[0]).toEqual({
    line: 1,
    prompt: expect.any(String),
    expected: expect.any(String),
    completion: expect.any(String),
    match: expect.any(Boolean),
  });
  expect(report.steps.map((s: { step: number }) => s.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  // Scores: the accuracy the round reports is its eval rows' exact matches (trimmed, case-insensitive). After these 12
  // steps the trained weights answer every held-out ticket with one of the five labels (the learner's first skill;
  // telling the labels apart takes more steps), so some are right; untrained weights answer noise: accuracy 0.
  const labels = ['billing', 'outage', 'login', 'shipping', 'refund'];
  const normalized = (text: string) => text.trim().replace(/\s+/g, ' ').toLowerCase();
  const evaluations: { expected: string; completion: string; match: boolean }[] = report.evaluations;
  expect(evaluations.map((e) => e.match)).toEqual(evaluations.map((e) => normalized(e.completion) === normalized(e.expected)));
  expect(result.accuracy).toBe(evaluations.filter((e) => e.match).length / evaluations.length);
  expect(report.accuracy).toBe(result.accuracy);
  expect(labels).toEqual(expect.arrayContaining(evaluations.map((e) => normalized(e.completion))));
  expect(result.accuracy!).toBeGreaterThan(0);

  const l = await ledger(emulator);
  const session = l.sessions.find((s) => s.resourceId === report.resource_id)!;
  expect(session.optimizerSteps).toBe(12);
  expect(l.active).not.toContain(report.resource_id);

  // History grows with segments, not steps.
  const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
  completedHistories.push({ workflowId, history });
  const events = history.events!.length;
  process.stderr.write(`[round] ${events} history events for 12 steps in 3 segments\n`);
  expect(events).toBeLessThan(120);
});

test('a cancelled round releases its trainer within 10 s and reports cancelled', async () => {
  const taskQueue = uniqueTaskQueue('round-cancel');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `cancel-${taskQueue}`, trainRows: 400, evalRows: 4 });
  const workflowId = `round-${taskQueue}`;
  await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId, args: [input] });
    for (let i = 0; i < 600; i++) {
      const p = await handle.query(roundProgressQuery);
      if (p.phase === 'training' && p.step >= 4) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const { resourceId } = await handle.query(roundProgressQuery);
    const cancelledAt = Date.now();
    await handle.cancel();
    await expect(handle.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    let released = false;
    while (Date.now() - cancelledAt < 10_000) {
      if (!(await ledger(emulator)).active.includes(resourceId!)) {
        released = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(released).toBe(true);
    process.stderr.write(`[round] cancel → deactivated in ${Date.now() - cancelledAt} ms\n`);
  });
  const report = await readArtifact(joinLocation(input.reportDir, 'round-1.json'));
  expect(report).toMatchObject({ status: 'cancelled', error_type: 'Cancelled', cleanup_status: 'deactivated' });
});

test('a pause interrupts a long segment within about a step: checkpoint, GPU released; resume ends with exact steps', async () => {
  const slow = await startTestEmulator({ provisioningDelayMs: 100, operationLatencyMs: 100 });
  try {
    const taskQueue = uniqueTaskQueue('round-pause');
    // One segment could hold the whole round (60 steps, at most 10 minutes): only an interruption stops it early.
    const input = ticketRoundInput({ baseUrl: slow.url, campaignId: `pause-${taskQueue}`, trainRows: 240, evalRows: 4 });
    Object.assign(input.spec.training, { epochs: 2, segmentSteps: 1000, segmentSeconds: 600 });
    const workflowId = `round-${taskQueue}`;
    await withWorker(taskQueue, async () => {
      const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId, args: [input] });
      const reached = async (what: string, test: (p: RoundProgress) => boolean, timeoutMs = 60_000) => {
        for (const until = Date.now() + timeoutMs; Date.now() < until; await new Promise((r) => setTimeout(r, 25))) {
          const p = await handle.query(roundProgressQuery);
          if (test(p)) return p;
        }
        throw new Error(`timed out waiting for ${what}`);
      };
      await reached('training', (p) => p.phase === 'training');
      await new Promise((r) => setTimeout(r, 1_000)); // a few steps into the one segment
      const pausedAt = Date.now();
      await handle.signal(pauseRoundSignal);
      const paused = await reached('paused', (p) => p.phase === 'paused');
      const pauseMs = Date.now() - pausedAt;
      expect((await ledger(slow)).active).toEqual([]); // the GPU is released while paused
      process.stderr.write(
        `[round] paused ${pauseMs} ms after the signal, at step ${paused.step} of 60 (one segment of up to 1000 steps)\n`,
      );
      expect(paused.step).toBeGreaterThan(0);
      expect(paused.step).toBeLessThan(45);
      await handle.signal(resumeRoundSignal);
      const result: RoundResult = await handle.result();
      expect(result).toMatchObject({ status: 'completed', stepsApplied: 60, totalSteps: 60 });
      const report = await readReport(result);
      expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 60 }, (_v, i) => i + 1));
      const l = await ledger(slow);
      expect(l.totals.optimizerSteps).toBe(60); // none lost, none doubled across the interruption
      expect(l.active).toEqual([]);
      expect(report.deactivated_ids).toHaveLength(2);
    });
  } finally {
    await slow.close();
  }
});

test('a GPU-minute budget interrupts a long segment when it runs out: stopped, checkpointed, overrun within seconds', async () => {
  const slow = await startTestEmulator({ provisioningDelayMs: 100, operationLatencyMs: 100 });
  try {
    const taskQueue = uniqueTaskQueue('round-budget');
    const input = ticketRoundInput({ baseUrl: slow.url, campaignId: `budget-${taskQueue}`, trainRows: 240, evalRows: 4 });
    Object.assign(input.spec.training, { epochs: 4, segmentSteps: 1000, segmentSeconds: 600 }); // one segment could hold all 120 steps (~17 s)
    input.budget = { maxGpuMinutes: 0.08 }; // 4.8 s of the trainer
    const result: RoundResult = await withWorker(taskQueue, () =>
      temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] }),
    );
    process.stderr.write(
      `[round] budget 0.08 GPU-min: stopped at step ${result.stepsApplied} of 120 with ${result.gpuMinutes.toFixed(3)} GPU-min\n`,
    );
    expect(result).toMatchObject({ status: 'stopped', stopReason: 'GPU-minute budget reached', totalSteps: 120 });
    expect(result.stepsApplied).toBeGreaterThan(0);
    expect(result.stepsApplied).toBeLessThan(120);
    expect(result.gpuMinutes).toBeLessThan(0.08 + 0.07); // overrun: heartbeat delivery (≤ 2 s), steps in flight, checkpoint, release
    expect(result.trainingCheckpointId).toBeDefined();
    const report = await readReport(result);
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: result.stepsApplied }, (_v, i) => i + 1));
    const l = await ledger(slow);
    expect(l.totals.optimizerSteps).toBe(result.stepsApplied);
    expect(l.active).toEqual([]);
  } finally {
    await slow.close();
  }
});

test('a round whose loss goes non-finite fails with that error type, releases the trainer and still reports', async () => {
  const taskQueue = uniqueTaskQueue('round-fail');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `fail-${taskQueue}`, trainRows: 16, evalRows: 4 });
  await setFaults(emulator, { rules: [{ kind: 'fail-operation', operation: 'optim-step', errorCode: 'NON_FINITE_LOSS', max: 1 }] });
  try {
    const err = await withWorker(taskQueue, async () => {
      const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
      return handle.result().catch((e: unknown) => e);
    });
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect((err as WorkflowFailedError).cause).toMatchObject({ type: 'NonFiniteLoss' });
  } finally {
    await setFaults(emulator, {});
  }
  const report = await readArtifact(joinLocation(input.reportDir, 'round-1.json'));
  expect(report).toMatchObject({ status: 'failed', error_type: 'NonFiniteLoss', cleanup_status: 'deactivated' });
  expect((await ledger(emulator)).active).not.toContain(report.resource_id);
});

test('a round that fails after sampling its answers (at the trained loss) still reports the accuracy it measured', async () => {
  const taskQueue = uniqueTaskQueue('round-late-fail');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `late-${taskQueue}`, trainRows: 16, evalRows: 4 });
  // Forward-backward passes: the baseline's 1 (4 eval rows, batch 8), 4 training steps, then the trained loss's:
  // refused as invalid input, which no retry or recovery outlives.
  await setFaults(emulator, {
    rules: [{ kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INVALID_INPUT', after: 5, max: 10 }],
  });
  try {
    const err = await withWorker(taskQueue, async () => {
      const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
      return handle.result().catch((e: unknown) => e);
    });
    expect(err).toBeInstanceOf(WorkflowFailedError);
  } finally {
    await setFaults(emulator, {});
  }
  const report = await readArtifact(joinLocation(input.reportDir, 'round-1.json'));
  expect(report).toMatchObject({ status: 'failed', error_type: 'ProviderRejected', steps_applied: 4, trained_loss: null });
  expect(report.accuracy).toEqual(expect.any(Number));
  expect(report.evaluations).toHaveLength(4);
});

test('bad data fails before anything is provisioned, naming file, line and field', async () => {
  const taskQueue = uniqueTaskQueue('round-bad');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `bad-${taskQueue}`, trainRows: 16, evalRows: 4 });
  fs.appendFileSync(input.data.train, '{"prompt": "", "answer": "billing"}\n');
  const before = (await ledger(emulator)).resources.length;
  const err = await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    return handle.result().catch((e: unknown) => e);
  });
  expect((err as WorkflowFailedError).cause).toMatchObject({ type: 'InvalidInput' });
  const report = await readArtifact(joinLocation(input.reportDir, 'round-1.json'));
  expect(report.error_type).toBe('InvalidInput');
  expect(report.cleanup_status).toBe('nothing-to-release');
  expect((await ledger(emulator)).resources.length).toBe(before);
  expect(((err as WorkflowFailedError).cause as Error).message).toContain(`${input.data.train}:17 prompt: must not be empty`);
  expect(report.error_message).toContain(`${input.data.train}:17 prompt: must not be empty`);
});

test('history grows with segments, not steps: twice the steps in the same number of segments adds no events', async () => {
  const eventsFor = async (trainRows: number, segmentSteps: number) => {
    const taskQueue = uniqueTaskQueue('round-events');
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `events-${taskQueue}`, trainRows, evalRows: 4 });
    input.spec.training.segmentSteps = segmentSteps;
    const workflowId = `round-${taskQueue}`;
    const result: RoundResult = await withWorker(taskQueue, async () =>
      (await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId, args: [input] })).result(),
    );
    const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
    completedHistories.push({ workflowId, history });
    return { steps: result.stepsApplied, events: history.events!.length };
  };
  const short = await eventsFor(48, 4); // 12 steps, 3 segments
  const long = await eventsFor(96, 8); // 24 steps, 3 segments
  process.stderr.write(
    `[round] ${short.events} events for ${short.steps} steps; ${long.events} events for ${long.steps} steps (3 segments each)\n`,
  );
  expect(long.steps).toBe(2 * short.steps);
  expect(Math.abs(long.events - short.events)).toBeLessThanOrEqual(2);
});

test('a step slower than the heartbeat timeout does not time its segment out: the segment heartbeats while it waits', async () => {
  const taskQueue = uniqueTaskQueue('slow-step');
  const input = ticketRoundInput({
    baseUrl: emulator.url,
    campaignId: `slow-${taskQueue}`,
    trainRows: 16,
    evalRows: 2,
    heartbeatTimeoutSeconds: 2,
  });
  input.spec.training.epochs = 1; // 2 steps
  // The first optimizer step's submission hangs 5 s (a hosted step, a queue): 2.5 heartbeat timeouts with nothing new to report.
  await setFaults(emulator, { rules: [{ kind: 'delay', method: 'POST', path: '/operations/optim-step$', delayMs: 5000, max: 1 }] });
  try {
    const workflowId = `round-${taskQueue}`;
    const result: RoundResult = await withWorker(taskQueue, async () =>
      (await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId, args: [input] })).result(),
    );
    expect(result.status).toBe('completed');
    expect(result.stepsApplied).toBe(2);
    const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
    // A timed-out attempt leaves no event of its own (the server retries it): its successor starts as attempt 2.
    const retried = (history.events ?? []).filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 1) > 1);
    const fired = (await (await fetch(`${emulator.url}/_emulator/faults`)).json()) as { fired: { fired: number }[] };
    expect(fired.fired[0]!.fired).toBe(1); // the step really hung
    expect(retried).toEqual([]); // and no activity was timed out for it
    completedHistories.push({ workflowId, history });
  } finally {
    await setFaults(emulator, {});
  }
});

test('histories of completed rounds replay without nondeterminism against the current code', async () => {
  expect(completedHistories.length).toBeGreaterThan(0);
  for (const { workflowId, history } of completedHistories) {
    await Worker.runReplayHistory({ workflowBundle: bundle }, history as never, workflowId);
  }
});

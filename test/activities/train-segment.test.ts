import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ProvisionGateHold } from '../../activities/provision-gate';
import { ownerTagFor } from '../../config/rules/owner-tag';
import { readStepRecords } from '../../activities/step-records';
import type { SegmentInput } from '../../workflows/round/contract';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { ActivityCancellationDetails } from '@temporalio/common';
import { arithmeticRoundInput, ticketRoundInput } from '../helpers/round';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';

let emulator: RunningEmulator;

/** MockActivityEnvironment.run, typed by the activity it runs. */
function run<A extends unknown[], R>(env: MockActivityEnvironment, fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
  return env.run<A, R, (...a: A) => Promise<R>>(fn, ...args);
}
let providers: ProviderRegistry;
// Provisioning takes the account's provision gate (a workflow): a worker on the task queue the activities run on.
let temporal: TestTemporal;
let worker: Worker;
let workerRun: Promise<void>;
const taskQueue = uniqueTaskQueue('segment');

beforeAll(async () => {
  emulator = await startTestEmulator();
  providers = new ProviderRegistry({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-seg-')),
    env: { ...process.env, BASETEN_API_KEY: 'bt-seg-key' },
  });
  temporal = await connectTestTemporal();
  worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: await bundleWorkflows(),
    providers,
  });
  workerRun = worker.run();
});

afterAll(async () => {
  worker?.shutdown();
  await workerRun;
  await temporal?.close();
  await providers.close();
  await emulator.close();
});

/** A provisioned trainer with an open session and a segment input for the ticket data (16 rows, batch 8, 2 epochs = 4 steps). */
async function setup(campaignId: string) {
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId, trainRows: 16, evalRows: 4 });
  const activities = createActivities(providers);
  const env = new MockActivityEnvironment();
  const plan = await run(env, activities.prepareRound, { spec: input.spec, data: input.data });
  const provisioning = new MockActivityEnvironment({ taskQueue }, { client: temporal.client });
  const trainer = await run(provisioning, activities.provisionTrainer, { spec: input.spec, ownerTag: campaignId });
  const session = await run(env, activities.openTrainingSession, {
    spec: input.spec,
    resourceId: trainer.resourceId,
    ownerTag: campaignId,
  });
  const segment: SegmentInput = {
    campaignId,
    round: 1,
    spec: { ...input.spec, training: { ...input.spec.training, segmentSteps: 2 } },
    data: { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 },
    sessionId: session.sessionId,
    stepOffset: session.stepOffset,
    cursor: { step: 0 },
    totalSteps: plan.totalSteps,
    stepsDir: path.join(input.reportDir, 'steps'),
  };
  return { activities, segment, trainer, session };
}

test('a segment trains from its cursor to its bound, heartbeating the cursor after every step', async () => {
  const { activities, segment, session } = await setup('seg-basic');
  const env = new MockActivityEnvironment();
  const beats: { step: number }[] = [];
  env.on('heartbeat', (d: { step: number }) => d && typeof d.step === 'number' && beats.push(d));
  const result = await run(env, activities.trainSegment, segment);
  expect(result).toMatchObject({ cursor: { step: 2 }, stepsApplied: 2 });
  expect(beats.map((b) => b.step)).toContain(2);
  expect((await ledger(emulator)).sessions.find((s) => s.id === session.sessionId)!.optimizerSteps).toBe(2);
});

test("a DPO segment's every heartbeat carries its cursor and saved checkpoints: its forward passes send none of their own", async () => {
  const campaignId = 'seg-dpo';
  const input = arithmeticRoundInput({
    baseUrl: emulator.url,
    campaignId,
    tickets: true,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.005, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 1 } }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
  });
  const activities = createActivities(providers);
  const env = new MockActivityEnvironment();
  const plan = await run(env, activities.prepareRound, { spec: input.spec, data: input.data });
  const provisioning = new MockActivityEnvironment({ taskQueue }, { client: temporal.client });
  const trainer = await run(provisioning, activities.provisionTrainer, { spec: input.spec, ownerTag: campaignId });
  const session = await run(env, activities.openTrainingSession, {
    spec: input.spec,
    resourceId: trainer.resourceId,
    ownerTag: campaignId,
  });
  const data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
  const referencePath = path.join(input.reportDir, 'reference-logprobs.json');
  await run(env, activities.computeDpoReference, {
    campaignId,
    round: 1,
    spec: input.spec,
    data,
    sessionId: session.sessionId,
    stepOffset: session.stepOffset,
    outputPath: referencePath,
  });

  // Every heartbeat the segment sends is what a retried attempt resumes from: a bare one would erase the cursor.
  const segmentEnv = new MockActivityEnvironment();
  const beats: unknown[] = [];
  segmentEnv.on('heartbeat', (d: unknown) => beats.push(d));
  const result = await run(segmentEnv, activities.trainDpoSegment, {
    campaignId,
    round: 1,
    spec: input.spec,
    data,
    sessionId: session.sessionId,
    stepOffset: session.stepOffset,
    cursor: { step: 0 },
    totalSteps: plan.totalSteps,
    stepsDir: path.join(input.reportDir, 'steps'),
    referencePath,
  });
  expect(result).toMatchObject({ cursor: { step: 4 }, stepsApplied: 4 });
  expect(beats.length).toBeGreaterThan(0);
  expect(beats.map((b) => typeof (b as { step?: unknown } | undefined)?.step)).not.toContain('undefined');
  // The checkpoints saved at steps 1–3 (not at the round's end) are in the last word.
  const last = beats[beats.length - 1] as { step: number; checkpoints: { step: number }[] };
  expect(last.step).toBe(4);
  expect(last.checkpoints.map((c) => c.step)).toEqual([1, 2, 3]);
});

test('a long segment writes its step records as it goes (every ROUNDHOUSE_RECORD_FLUSH_MS), not only when it ends', async () => {
  const { activities, segment, session } = await setup('seg-flush');
  const stepFiles = () => (fs.existsSync(segment.stepsDir) ? fs.readdirSync(segment.stepsDir).filter((f) => f.startsWith('steps-')) : []);
  /** Trains steps (from, from + 2] in one segment; returns how many step files it wrote. */
  const filesWritten = async (from: number, flushMs: string | undefined) => {
    const before = stepFiles().length;
    const previous = process.env.ROUNDHOUSE_RECORD_FLUSH_MS;
    if (flushMs === undefined) delete process.env.ROUNDHOUSE_RECORD_FLUSH_MS;
    else process.env.ROUNDHOUSE_RECORD_FLUSH_MS = flushMs;
    try {
      const result = await run(new MockActivityEnvironment(), activities.trainSegment, { ...segment, cursor: { step: from } });
      expect(result.cursor.step).toBe(from + 2);
    } finally {
      if (previous === undefined) delete process.env.ROUNDHOUSE_RECORD_FLUSH_MS;
      else process.env.ROUNDHOUSE_RECORD_FLUSH_MS = previous;
    }
    return stepFiles().length - before;
  };
  // Flushing at every chance: each confirmed step is written as soon as it is confirmed, a file each.
  expect(await filesWritten(0, '1')).toBe(2);
  // With the default minute, a segment this short writes once, at its end.
  expect(await filesWritten(2, undefined)).toBe(1);
  expect((await readStepRecords(segment.stepsDir)).map((r) => r.step)).toEqual([1, 2, 3, 4]);
  await (await providers.providerFor(segment.spec.provider)).closeSession(session.sessionId); // the trainer takes 5 sessions
});

test('a segment ends at its time bound (segmentSeconds): the steps in flight land, and nothing more is submitted', async () => {
  const { activities, segment, session } = await setup('seg-deadline');
  segment.spec.training = { ...segment.spec.training, segmentSteps: 4, segmentSeconds: 1 };
  await setFaults(emulator, { latencyMs: 250 }); // every request: a step takes well over a second
  try {
    const result = await run(new MockActivityEnvironment(), activities.trainSegment, segment);
    // Cut by time, not by its 4 steps; whatever it submitted was applied and recorded.
    expect(result.cursor.step).toBeGreaterThanOrEqual(1);
    expect(result.cursor.step).toBeLessThan(4);
    expect((await ledger(emulator)).sessions.find((s) => s.id === session.sessionId)!.optimizerSteps).toBe(result.cursor.step);
  } finally {
    await setFaults(emulator, {});
    await (await providers.providerFor(segment.spec.provider)).closeSession(session.sessionId);
  }
});

test("a retried attempt trusts the trainer's step counter over a stale heartbeat: nothing is applied twice", async () => {
  const { activities, segment, session } = await setup('seg-resume');
  // The first attempt applied steps 1 and 2, but the last heartbeat the server kept said step 1 (throttled).
  await run(new MockActivityEnvironment(), activities.trainSegment, segment);
  const second = new MockActivityEnvironment({ heartbeatDetails: { step: 1, inFlight: [] }, attempt: 2 });
  const result = await run(second, activities.trainSegment, segment);
  expect(result.cursor.step).toBe(2);
  const entry = (await ledger(emulator)).sessions.find((s) => s.id === session.sessionId)!;
  expect(entry.optimizerSteps).toBe(2);
  expect((await readStepRecords(segment.stepsDir)).map((r) => r.step)).toEqual([1, 2]);
});

test('steps an attempt applied but never recorded are recorded from their keyed operations, not applied again', async () => {
  const { activities, segment, session } = await setup('seg-unrecorded');
  await run(new MockActivityEnvironment(), activities.trainSegment, segment);
  const recorded = await readStepRecords(segment.stepsDir);
  fs.rmSync(segment.stepsDir, { recursive: true }); // the attempt died after the trainer applied both steps, before writing
  const result = await run(new MockActivityEnvironment({ attempt: 2 }), activities.trainSegment, segment);
  expect(result.cursor.step).toBe(2);
  const entry = (await ledger(emulator)).sessions.find((s) => s.id === session.sessionId)!;
  expect(entry.optimizerSteps).toBe(2);
  expect(entry.duplicatesAbsorbed).toBe(2); // steps 1 and 2's forward_backward, asked again under their keys
  // The same losses as the first attempt saw (`at` is when each record was made: this attempt's, later).
  const content = (records: { step: number; loss: number; tokens: number }[]) =>
    records.map(({ step, loss, tokens }) => ({ step, loss, tokens }));
  const again = await readStepRecords(segment.stepsDir);
  expect(content(again)).toEqual(content(recorded));
  for (const [i, r] of again.entries()) expect(r.at).toBeGreaterThanOrEqual(recorded[i]!.at!);
});

test('a provider step counter outside the segment fails loudly instead of training over it', async () => {
  const { activities, segment, session } = await setup('seg-mismatch');
  const provider = await providers.providerFor(segment.spec.provider);
  // Someone else applies three steps to this session.
  for (let i = 0; i < 3; i++)
    await provider.awaitOperation(await provider.submitOptimStep(session.sessionId, `intruder/${i}`, { learningRate: 0.001 }));
  const env = new MockActivityEnvironment();
  await expect(run(env, activities.trainSegment, segment)).rejects.toMatchObject({ type: 'StepCounterMismatch', nonRetryable: true });
  expect((await ledger(emulator)).sessions.find((s) => s.id === session.sessionId)!.optimizerSteps).toBe(3);
});

test('a provisioning attempt killed right after its create, before its heartbeat arrived: the retry adopts that trainer from the listing noted on the gate, and creates none', async () => {
  const owner = `round-gate-note-${Date.now().toString(36)}`;
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: owner, trainRows: 16, evalRows: 4 });
  const provider = await providers.providerFor(input.spec.provider);
  const model = input.spec.provider.model;
  const gate = { taskQueue, provider: provider.kind, account: provider.account, model };
  // The first attempt takes the gate, lists, notes its listing on the gate, creates… and dies (no heartbeat, no release).
  const hold = await ProvisionGateHold.acquire(temporal.client, { gate, owner, leaseSeconds: 60 });
  const before = (await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id);
  await hold.noteListing(before);
  const created = (await provider.provision({ model, ownerTag: ownerTagFor(owner), generatorReplicas: 1, inactiveTimeoutSeconds: 1800 }))
    .id;
  hold.abandon();

  const retry = new MockActivityEnvironment(
    { taskQueue, attempt: 2, workflowExecution: { workflowId: owner, runId: 'run-1' } },
    { client: temporal.client },
  );
  const trainer = await run(retry, createActivities(providers).provisionTrainer, { spec: input.spec, ownerTag: ownerTagFor(owner) });
  expect(trainer.resourceId).toBe(created);
  const after = (await ledger(emulator)).resources.filter((r) => !before.includes(r.id));
  expect(after.map((r) => r.id)).toEqual([created]); // nothing created twice
  await provider.deactivate(created);
});

test('a provisioning attempt killed while its trainer waited in the capacity queue, after releasing the gate but before its heartbeat carried the id: the retry adopts that trainer, and creates none', async () => {
  const owner = `round-gate-mine-${Date.now().toString(36)}`;
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: owner, trainRows: 16, evalRows: 4 });
  const provider = await providers.providerFor(input.spec.provider);
  const model = input.spec.provider.model;
  const gate = { taskQueue, provider: provider.kind, account: provider.account, model };
  const workflowExecution = { workflowId: owner, runId: 'run-1' };
  // The first attempt (activity 'test' of run-1) takes the gate, lists, creates, releases the gate saying what it
  // created… and dies before a heartbeat carried the id (the soak's round 16 left such a trainer billing).
  const known = new Set((await ledger(emulator)).resources.map((r) => r.id));
  const hold = await ProvisionGateHold.acquire(temporal.client, { gate, owner, leaseSeconds: 60, provisioning: 'run-1/test' });
  const before = (await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id);
  await hold.noteListing(before);
  const created = (await provider.provision({ model, ownerTag: ownerTagFor(owner), generatorReplicas: 1, inactiveTimeoutSeconds: 1800 }))
    .id;
  await hold.release(created);

  const retry = new MockActivityEnvironment({ taskQueue, attempt: 2, workflowExecution }, { client: temporal.client });
  const trainer = await run(retry, createActivities(providers).provisionTrainer, { spec: input.spec, ownerTag: ownerTagFor(owner) });
  expect(trainer.resourceId).toBe(created);
  const after = (await ledger(emulator)).resources.filter((r) => !known.has(r.id));
  expect(after.map((r) => r.id)).toEqual([created]); // nothing created twice
  await provider.deactivate(created);
});

test('Baseten: a provisioning attempt killed after its create, before any heartbeat carried its listing: the retry adopts the run by its tag, and creates none', async () => {
  const owner = `round-bt-tag-${Date.now().toString(36)}`;
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: owner, trainRows: 16, evalRows: 4 });
  input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: emulator.url };
  const provider = await providers.providerFor(input.spec.provider);
  const known = new Set((await ledger(emulator)).resources.map((r) => r.id));
  const scheduled = Date.now();
  const created = (
    await provider.provision({
      model: input.spec.provider.model,
      ownerTag: ownerTagFor(owner),
      generatorReplicas: 1,
      inactiveTimeoutSeconds: 1800,
    })
  ).id;
  const retry = new MockActivityEnvironment(
    { taskQueue, attempt: 2, scheduledTimestampMs: scheduled, workflowExecution: { workflowId: owner, runId: 'run-1' } },
    { client: temporal.client },
  );
  const trainer = await run(retry, createActivities(providers).provisionTrainer, { spec: input.spec, ownerTag: ownerTagFor(owner) });
  expect(trainer.resourceId).toBe(created);
  expect((await ledger(emulator)).resources.filter((r) => !known.has(r.id)).map((r) => r.id)).toEqual([created]);
  await provider.deactivate(created);
});

test('a worker shutting down while its trainer waits in the capacity queue keeps the trainer: the retry resumes waiting for the same one', async () => {
  const owner = `round-shutdown-${Date.now().toString(36)}`;
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: owner, trainRows: 16, evalRows: 4 });
  const provider = await providers.providerFor(input.spec.provider);
  const known = new Set((await ledger(emulator)).resources.map((r) => r.id));
  await setFaults(emulator, { rules: [{ kind: 'capacity-queue', max: 1, durationMs: 4000, queuePosition: 2 }] });
  try {
    const workflowExecution = { workflowId: owner, runId: 'run-1' };
    const first = new MockActivityEnvironment({ taskQueue, workflowExecution }, { client: temporal.client });
    let beat: unknown;
    first.on('heartbeat', (d: unknown) => (beat = d));
    const attempt = run(first, createActivities(providers).provisionTrainer, { spec: input.spec, ownerTag: ownerTagFor(owner) });
    for (let i = 0; i < 100 && !(beat as { resourceId?: string } | undefined)?.resourceId; i++) await new Promise((r) => setTimeout(r, 50));
    first.cancel('WORKER_SHUTDOWN', new ActivityCancellationDetails({ workerShutdown: true }));
    await expect(attempt).rejects.toThrow();
    const queued = (beat as { resourceId: string }).resourceId;
    expect((await ledger(emulator)).active).toContain(queued); // still in the queue, not deactivated

    const retry = new MockActivityEnvironment(
      { taskQueue, attempt: 2, workflowExecution, heartbeatDetails: beat },
      { client: temporal.client },
    );
    const trainer = await run(retry, createActivities(providers).provisionTrainer, { spec: input.spec, ownerTag: ownerTagFor(owner) });
    expect(trainer.resourceId).toBe(queued);
    expect((await ledger(emulator)).resources.filter((r) => !known.has(r.id)).map((r) => r.id)).toEqual([queued]);
    await provider.deactivate(queued);
  } finally {
    await setFaults(emulator, {});
  }
});

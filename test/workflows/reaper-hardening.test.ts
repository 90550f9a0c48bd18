import { reaperWorkflow, roundWorkflow } from '../../workflows';
import { roundProgressQuery } from '../../workflows/round/contract';
import type { ReaperInput, ReaperResult } from '../../activities/reaper';
import { registeredTrainers } from '../../config/rules/trainer-registry';
import { ownerTagFor } from '../../config/rules/owner-tag';
import { ledger, raw, setFaults, togetherProvider } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';
import { BasetenProvider } from '../../providers/baseten/client';
import { TinkerProvider } from '../../providers/tinker/client';
import type { WorkflowHandle } from '@temporalio/client';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess } from '../helpers/worker-process';
import { reaperScheduleId } from '../../workers/schedules';

// The reaper knows every trainer a round created from the round itself (its memo, read through visibility): it never
// takes a live round's trainer, however it looks at the provider, and releases a closed round's on the endpoint the
// round used; failures are isolated per endpoint and per resource and reported.
const { env, withWorker } = roundTestEnvironment(
  { provisioningDelayMs: 50 },
  { ...process.env, TOGETHER_API_KEY: 'tg-reaper-key', BASETEN_API_KEY: 'bt-reaper-key', TINKER_API_KEY: 'tml-reaper-key' },
);

/** An endpoint nothing listens on (a configured provider that is down). */
const DOWN = 'http://127.0.0.1:9';

afterEach(async () => {
  await setFaults(env.emulator, {});
});

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const trainersOf = async (handle: WorkflowHandle) => registeredTrainers((await handle.describe()).memo);

/** A workflow of this namespace that has completed: owner tags naming it belong to a closed owner. */
async function completedOwner(taskQueue: string, workflowId: string): Promise<string> {
  await env.temporal.client.workflow.execute(reaperWorkflow, { taskQueue, workflowId, args: [{ providers: [], graceSeconds: 300 }] });
  return workflowId;
}

const pass = (taskQueue: string, input: ReaperInput): Promise<ReaperResult> =>
  env.temporal.client.workflow.execute(reaperWorkflow, { taskQueue, workflowId: `reaper-${taskQueue}-${Date.now()}`, args: [input] });

test("a round terminated while its trainer waits for capacity: a reaper configured with only a down endpoint reaps it on the round's own endpoint, and reports the one it could not reach", async () => {
  const taskQueue = uniqueTaskQueue('reap-registry');
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-queue', max: 1, durationMs: 120_000, queuePosition: 3 }] });
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `reap-registry-${taskQueue}`, trainRows: 16, evalRows: 2 });
  await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    await until('the round to record its trainer', async () => (await trainersOf(handle)).length === 1);
    const [trainer] = await trainersOf(handle);
    expect(trainer).toEqual({ resourceId: expect.any(String) as string, kind: 'local', baseUrl: env.emulator.url });
    await handle.terminate('test: a round terminated while provisioning');
    expect((await ledger(env.emulator)).active).toContain(trainer!.resourceId); // queued: termination ran no cleanup

    const result = await pass(taskQueue, { providers: [{ kind: 'together', baseUrl: DOWN }], graceSeconds: 300 });
    process.stderr.write(`[reaper] ${JSON.stringify({ reaped: result.reaped, unchecked: result.unchecked })}\n`);
    expect(result.reaped).toEqual([
      expect.objectContaining({ resourceId: trainer!.resourceId, ownerStatus: 'TERMINATED', action: 'deactivated' }),
    ]);
    expect(result.unchecked).toEqual([expect.objectContaining({ provider: `together@${DOWN}` })]);
    expect(result.endpoints).toEqual(expect.arrayContaining([`together@${DOWN}`, `local@${env.emulator.url}`]));
    expect((await ledger(env.emulator)).active).not.toContain(trainer!.resourceId);
  });
});

test('live rounds keep their trainers through 3 passes of the most aggressive rule: one waiting for capacity (untagged, no session yet) and paused by an operator (status PAUSED), one training under a 250-character id', async () => {
  const taskQueue = uniqueTaskQueue('reap-live');
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-queue', max: 1, durationMs: 120_000, queuePosition: 2 }] });
  const waiting = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `reap-wait-${taskQueue}`, trainRows: 16, evalRows: 2 });
  const training = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `reap-long-${taskQueue}`, trainRows: 400, evalRows: 2 });
  const longId = `round-${taskQueue}-`.padEnd(250, 'x');
  await withWorker(taskQueue, async () => {
    const w = await env.temporal.client.workflow.start(roundWorkflow, {
      taskQueue,
      workflowId: `round-wait-${taskQueue}`,
      args: [waiting],
    });
    await until('the waiting round to record its trainer', async () => (await trainersOf(w)).length === 1);
    const l = await env.temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: longId, args: [training] });
    await until('the long-id round to train', async () => (await l.query(roundProgressQuery)).phase === 'training');
    const ids = [(await trainersOf(w))[0]!.resourceId, (await l.query(roundProgressQuery)).resourceId!];
    // An operator pauses the waiting round (Temporal's own pause: the workflow's status reads PAUSED).
    const { client } = env.temporal;
    await client.workflowService.pauseWorkflowExecution({
      namespace: client.options.namespace,
      workflowId: w.workflowId,
      reason: 'test: an operator pause',
      requestId: `pause-${taskQueue}`,
    });
    expect((await w.describe()).status.name).toBe('PAUSED');
    // Untagged resources reaped at any age, and every endpoint scanned: only the rounds' own records protect them.
    const aggressive: ReaperInput = {
      providers: [{ kind: 'local', baseUrl: env.emulator.url }],
      graceSeconds: 0,
      reapUntagged: true,
      untaggedGraceMinutes: 0,
    };
    for (let i = 0; i < 3; i++) {
      const result = await pass(taskQueue, aggressive);
      expect(result.reaped.map((r) => r.resourceId)).not.toEqual(expect.arrayContaining([ids[0]]));
      expect(result.reaped.map((r) => r.resourceId)).not.toEqual(expect.arrayContaining([ids[1]]));
      expect(result.kept).toContainEqual(
        expect.objectContaining({ resourceId: ids[0], ownerStatus: 'PAUSED', reason: 'a paused round records it' }),
      );
      expect(result.kept).toContainEqual(
        expect.objectContaining({ resourceId: ids[1], ownerStatus: 'RUNNING', reason: 'a running round records it' }),
      );
    }
    const active = (await ledger(env.emulator)).active;
    for (const id of ids) expect(active).toContain(id);
    expect((await l.query(roundProgressQuery)).phase).toBe('training');
    await client.workflowService.unpauseWorkflowExecution({
      namespace: client.options.namespace,
      workflowId: w.workflowId,
      reason: 'test: unpaused',
      requestId: `unpause-${taskQueue}`,
    });
    await Promise.all([w.cancel(), l.cancel()]);
    await Promise.all([w.result().catch(() => undefined), l.result().catch(() => undefined)]);
    // Released by the rounds themselves: the memo no longer lists them.
    expect(await trainersOf(w)).toEqual([]);
    expect(await trainersOf(l)).toEqual([]);
  });
});

test('owner tags: a trainer whose owner is no workflow of this namespace is kept and reported; one whose owner completed is reaped, as is a sampler billed on its own, with listings paged', async () => {
  const taskQueue = uniqueTaskQueue('reap-tags');
  const baseten = new BasetenProvider({ baseUrl: env.emulator.url, apiKey: 'bt-reaper-key' });
  try {
    const elsewhere = await baseten.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(`other-namespace-${taskQueue}`) });
    await withWorker(taskQueue, async () => {
      const owner = await completedOwner(taskQueue, `owner-done-${taskQueue}`);
      const finished = await baseten.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(owner) });
      // A run of the same owner whose sampler create the service applied twice: the duplicate is billed on its own
      // and outlives the run. Listings come one item per page.
      const auth = { apiKey: 'bt-reaper-key' };
      const trainer = await baseten.provision({
        model: 'roundhouse/tiny-chat',
        ownerTag: ownerTagFor(owner),
        generatorReplicas: 0,
      });
      const { session_id } = (await raw(env.emulator, 'GET', `/v1/loops/runs/${trainer.id}`, auth)).json.run;
      await setFaults(env.emulator, { rules: [{ kind: 'duplicate-create', max: 1 }], listPageSize: 1 });
      const paired = await raw(env.emulator, 'POST', '/v1/loops/samplers', { ...auth, body: { session_id, run_id: trainer.id } });
      expect((await raw(env.emulator, 'POST', `/v1/loops/runs/${trainer.id}/deactivate`, auth)).status).toBe(200);
      const samplers = await baseten.listStrayResources();
      expect(samplers).toHaveLength(1);
      const duplicate = samplers[0]!.id;
      expect(duplicate).not.toBe(paired.json.sampler.id);
      expect((await ledger(env.emulator)).active).toContain(duplicate);

      const result = await pass(taskQueue, { providers: [{ kind: 'baseten', baseUrl: env.emulator.url }], graceSeconds: 0 });
      expect(result.reaped).toContainEqual(
        expect.objectContaining({ resourceId: duplicate, ownerStatus: 'COMPLETED', action: 'deactivated' }),
      );
      expect((await ledger(env.emulator)).active).not.toContain(duplicate);
      expect(result.kept).toContainEqual(
        expect.objectContaining({
          resourceId: elsewhere.id,
          ownerStatus: 'NOT_FOUND',
          reason: expect.stringMatching(/not a workflow of this namespace/) as string,
        }),
      );
      expect(result.reaped).toContainEqual(expect.objectContaining({ resourceId: finished.id, ownerStatus: 'COMPLETED' }));
    });
    await baseten.deactivate(elsewhere.id);
  } finally {
    await baseten.close();
  }
});

test("a plain `roundhouse worker` runs the reaper: a terminated round's trainer on the spec's own endpoint is reaped within the period + 30 s while a configured endpoint is down", async () => {
  const taskQueue = uniqueTaskQueue('reap-worker');
  const env0 = { ...crashTestWorkerEnv(taskQueue, await bundleToFile()), TOGETHER_API_KEY: 'tg-reaper-key' };
  const schedule = env.temporal.client.schedule.getHandle(reaperScheduleId(taskQueue));
  // No flag at all: the worker creates the reaper schedule (every minute).
  const plain = startWorkerProcess(env0, { reaper: true });
  try {
    await plain.ready;
    const described = await schedule.describe();
    expect(described.spec.intervals?.[0]?.every).toBe(60_000);
  } finally {
    await plain.stop();
  }
  // Faster passes, and Together's default endpoint (unreachable here) added to what the schedule scans.
  const worker = startWorkerProcess(env0, { args: ['--reaper', 'together', '--reaper-every', '5 seconds'] });
  try {
    await worker.ready;
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `reap-worker-${taskQueue}`, trainRows: 400, evalRows: 2 });
    const handle = await env.temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    await until('training', async () => (await handle.query(roundProgressQuery)).phase === 'training', 120_000);
    const { resourceId } = await handle.query(roundProgressQuery);
    await handle.terminate('test: terminated mid-training');
    const terminatedAt = Date.now();
    await until('the reaper to release the trainer', async () => !(await ledger(env.emulator)).active.includes(resourceId!), 35_000);
    process.stderr.write(`[reaper] plain worker: terminated round's trainer reaped after ${Date.now() - terminatedAt} ms (period 5 s)\n`);
    const args = (await schedule.describe()).action;
    expect(args.type === 'startWorkflow' && (args.args?.[0] as ReaperInput).providers).toEqual([{ kind: 'together', model: '' }]);
  } finally {
    await worker.stop();
    await schedule.delete().catch(() => undefined);
  }
});

test('one failing resource does not stop the pass: its deactivation keeps failing and it is reported unchecked, while the next is reaped', async () => {
  const taskQueue = uniqueTaskQueue('reap-isolate');
  const baseten = new BasetenProvider({ baseUrl: env.emulator.url, apiKey: 'bt-reaper-key' });
  try {
    await withWorker(taskQueue, async () => {
      const owner = await completedOwner(taskQueue, `owner-isolate-${taskQueue}`);
      const failing = await baseten.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(owner) });
      const healthy = await baseten.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(owner) });
      await setFaults(env.emulator, {
        rules: [{ kind: 'http-500', method: 'POST', path: `/v1/loops/runs/${failing.id}/deactivate$`, max: 1000, retryAfterMs: 10 }],
      });
      const result = await pass(taskQueue, { providers: [{ kind: 'baseten', baseUrl: env.emulator.url }], graceSeconds: 0 });
      expect(result.unchecked).toEqual([
        expect.objectContaining({ resourceId: failing.id, error: expect.stringMatching(/500/) as string }),
      ]);
      expect(result.reaped).toContainEqual(
        expect.objectContaining({ resourceId: healthy.id, ownerStatus: 'COMPLETED', action: 'deactivated' }),
      );
      const active = (await ledger(env.emulator)).active;
      expect(active).toContain(failing.id);
      expect(active).not.toContain(healthy.id);
      await setFaults(env.emulator, {});
      await baseten.deactivate(failing.id);
    });
  } finally {
    await baseten.close();
  }
});

test("Tinker: a training round's session is kept through the pass; a terminated round's session is finished (its loaded model unloaded), and another namespace's is kept", async () => {
  const taskQueue = uniqueTaskQueue('reap-tinker');
  const tinker = new TinkerProvider({ baseUrl: env.emulator.url, apiKey: 'tml-reaper-key' });
  const tinkerRound = (campaignId: string, trainRows: number) => {
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId, trainRows, evalRows: 2 });
    input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
    return input;
  };
  try {
    const elsewhere = await tinker.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(`other-namespace-${taskQueue}`) });
    await withWorker(taskQueue, async () => {
      const { client } = env.temporal;
      const live = await client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-live-${taskQueue}`,
        args: [tinkerRound(`reap-tinker-live-${taskQueue}`, 400)],
      });
      const doomed = await client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-doomed-${taskQueue}`,
        args: [tinkerRound(`reap-tinker-doomed-${taskQueue}`, 400)],
      });
      for (const h of [live, doomed])
        await until('the round to train', async () => (await h.query(roundProgressQuery)).phase === 'training');
      const liveSession = (await live.query(roundProgressQuery)).resourceId!;
      const doomedSession = (await doomed.query(roundProgressQuery)).resourceId!;
      const doomedModel = (await doomed.query(roundProgressQuery)).sessionId!;
      await doomed.terminate('test: terminated, no cleanup runs');
      expect((await ledger(env.emulator)).active).toContain(doomedModel); // still loaded: nobody released it

      const result = await pass(taskQueue, { providers: [{ kind: 'tinker', baseUrl: env.emulator.url }], graceSeconds: 0 });
      expect(result.reaped).toContainEqual(expect.objectContaining({ resourceId: doomedSession, ownerStatus: 'TERMINATED' }));
      expect(result.kept).toContainEqual(
        expect.objectContaining({ resourceId: liveSession, ownerStatus: 'RUNNING', reason: 'a running round records it' }),
      );
      expect(result.kept).toContainEqual(expect.objectContaining({ resourceId: elsewhere.id, ownerStatus: 'NOT_FOUND' }));
      expect((await ledger(env.emulator)).active).not.toContain(doomedModel);
      expect(await tinker.getResource(doomedSession)).toMatchObject({ state: 'stopped', providerStatus: 'client_finished' });
      expect((await live.query(roundProgressQuery)).phase).toBe('training');
      await live.cancel();
      await live.result().catch(() => undefined);
      expect(await tinker.getResource(liveSession)).toMatchObject({ state: 'stopped' }); // released by the round itself
    });
    await tinker.deactivate(elsewhere.id);
  } finally {
    await tinker.close();
  }
});

test("a trainer shared by a sweep's arms (a session per arm, each tagged with its arm): kept while any arm is open, reaped once all are closed", async () => {
  const taskQueue = uniqueTaskQueue('reap-shared');
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-queue', max: 1, durationMs: 120_000, queuePosition: 2 }] });
  const waiting = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `reap-shared-${taskQueue}`, trainRows: 16, evalRows: 2 });
  const provider = togetherProvider(env.emulator, 'tg-reaper-key');
  await withWorker(taskQueue, async () => {
    // An open arm: a round waiting for capacity (running); a closed arm: a workflow that has completed.
    const open = await env.temporal.client.workflow.start(roundWorkflow, {
      taskQueue,
      workflowId: `open-arm-${taskQueue}`,
      args: [waiting],
    });
    await until('the open arm to record its trainer', async () => (await trainersOf(open)).length === 1);
    const closed = await completedOwner(taskQueue, `closed-arm-${taskQueue}`);
    const closedToo = await completedOwner(taskQueue, `closed-arm-2-${taskQueue}`);
    const shared = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: ownerTagFor(`sweep-${taskQueue}`) });
    await provider.waitReady(shared.id);
    // The open arm's session between two closed arms': whichever way the provider lists them, a closed one comes first.
    for (const owner of [closed, open.workflowId, closedToo])
      await provider.openSession({ resourceId: shared.id, loraRank: 8, displayName: ownerTagFor(owner) });
    const reaper = { providers: [{ kind: 'together' as const, baseUrl: env.emulator.url }], graceSeconds: 0 };

    const first = await pass(taskQueue, reaper);
    expect(first.kept).toEqual(
      expect.arrayContaining([expect.objectContaining({ resourceId: shared.id, owner: open.workflowId, ownerStatus: 'RUNNING' })]),
    );
    expect((await ledger(env.emulator)).active).toContain(shared.id);

    await open.terminate('test: the last arm closes');
    const second = await pass(taskQueue, reaper);
    expect(second.reaped).toEqual(expect.arrayContaining([expect.objectContaining({ resourceId: shared.id, action: 'deactivated' })]));
    expect((await ledger(env.emulator)).active).not.toContain(shared.id);
  });
});

import fs from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities } from '../../activities';
import { ownerTagFor } from '../../config/rules/owner-tag';
import { roundWorkflow } from '../../workflows';
import { roundProgressQuery, type RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Release and the report, hardened: a hung session stop never holds up deactivation, and a report that cannot be
// written never replaces the round's result.
const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 });

afterEach(async () => {
  await setFaults(env.emulator, {});
});

test('releasing a trainer deactivates it at once even when its session stop hangs', async () => {
  const input = ticketRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `release-${Date.now().toString(36)}`,
    trainRows: 16,
    evalRows: 2,
  });
  const provider = await env.providers.providerFor(input.spec.provider);
  const resource = await provider.provision({ model: input.spec.provider.model, ownerTag: ownerTagFor('release-test') });
  await provider.waitReady(resource.id, { timeoutMs: 30_000 });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, displayName: ownerTagFor('release-test') });
  // The session's stop answers only after 20 s (a hung provider call).
  await setFaults(env.emulator, { rules: [{ kind: 'delay', path: '/training-sessions/[^/]+/stop$', delayMs: 20_000, max: 5 }] });
  const started = Date.now();
  const activity = createActivities(env.providers).releaseTrainer;
  const released = (await new MockActivityEnvironment().run(activity, {
    spec: input.spec,
    resourceId: resource.id,
    sessionId: session.id,
  })) as Awaited<ReturnType<typeof activity>>;
  const tookMs = Date.now() - started;
  process.stderr.write(`[cleanup] released in ${tookMs} ms with the session stop hanging\n`);
  expect(released.status).toBe('deactivated');
  expect((await ledger(env.emulator)).active).not.toContain(resource.id);
  expect(tookMs).toBeLessThan(10_000);
});

test('a round whose report cannot be written keeps its result (the campaign continues from its checkpoint) and says why', async () => {
  const taskQueue = uniqueTaskQueue('report-fails');
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `report-fails-${taskQueue}`, trainRows: 32, evalRows: 2 });
  const result: RoundResult = await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    for (let i = 0; i < 600 && (await handle.query(roundProgressQuery)).phase !== 'training'; i++)
      await new Promise((r) => setTimeout(r, 50));
    // Where the report goes, a directory now stands: no retry can write it.
    fs.mkdirSync(path.join(input.reportDir, 'round-1.json', 'in-the-way'), { recursive: true });
    return handle.result();
  });
  expect(result.status).toBe('completed');
  expect(result.trainingCheckpointId).toEqual(expect.any(String));
  expect(result.reportError).toMatch(/cannot write the round report .*round-1\.json: EISDIR/);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('a round cancelled while its trainer create is still in flight releases the trainer the create then makes', async () => {
  const taskQueue = uniqueTaskQueue('cancel-create');
  // The create is applied 3 s after it is sent: the round is cancelled before anyone knows the trainer's id.
  await setFaults(env.emulator, { rules: [{ kind: 'delay', method: 'POST', path: '/model-resources$', max: 1, delayMs: 3_000 }] });
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `cancel-create-${taskQueue}`, trainRows: 16, evalRows: 2 });
  const before = new Set((await ledger(env.emulator)).resources.map((r) => r.id));
  await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await handle.query(roundProgressQuery)).phase).toBe('provisioning');
    await handle.cancel();
    await handle.result().catch(() => undefined);
    // The create lands after the round was cancelled; give it time, then nothing of this round may still bill.
    await new Promise((r) => setTimeout(r, 3_000));
    const created = (await ledger(env.emulator)).resources.filter((r) => !before.has(r.id));
    expect(created).toHaveLength(1);
    expect((await ledger(env.emulator)).active).not.toContain(created[0]!.id);
  });
});

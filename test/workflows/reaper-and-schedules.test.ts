import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadWorkerSettings } from '../../config/io/worker-env';
import { resolveTemporalExecutable } from '../../workers/temporal-server';
import { ProviderRegistry } from '../../workers/providers';
import { ensureReaperSchedule, upsertCampaignSchedule } from '../../workers/schedules';
import { createRoundhouseWorker } from '../../workers/worker';
import { campaignProgressQuery, type CampaignInput } from '../../workflows/campaign/contract';
import { roundProgressQuery } from '../../workflows/round/contract';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ticketRoundInput } from '../helpers/round';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { campaignWorkflow, roundWorkflow } from '../../workflows';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;
const REAPER_EVERY_SECONDS = 3;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 100, operationLatencyMs: 20 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-rproviders-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

/** Terminates a workflow with the Temporal CLI, as an operator would: no workflow code runs. */
function terminateWithCli(workflowId: string): void {
  const cli = resolveTemporalExecutable(loadWorkerSettings()).path!;
  execFileSync(
    cli,
    [
      'workflow',
      'terminate',
      '--workflow-id',
      workflowId,
      '--address',
      process.env.TEMPORAL_ADDRESS!,
      '--namespace',
      temporal.settings.namespace,
      '--reason',
      'test',
    ],
    { stdio: 'pipe' },
  );
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs) {
    if (await check()) return Date.now() - started;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

test('a terminated round leaves its trainer active; the reaper schedule deactivates it within its period + 30 s, default grace notwithstanding', async () => {
  const taskQueue = uniqueTaskQueue('reaper');
  const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `reap-${taskQueue}`, trainRows: 400, evalRows: 4 });
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  await worker.runUntil(async () => {
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    await waitUntil('training', async () => (await handle.query(roundProgressQuery)).phase === 'training', 30_000);
    const { resourceId } = await handle.query(roundProgressQuery);
    terminateWithCli(handle.workflowId);
    await new Promise((r) => setTimeout(r, 500));
    expect((await ledger(emulator)).active).toContain(resourceId); // termination ran no cleanup

    const schedule = await ensureReaperSchedule(temporal.client, {
      scheduleId: `reaper-${taskQueue}`,
      taskQueue,
      providers: [{ kind: 'local', baseUrl: emulator.url, model: 'roundhouse/tiny-chat' }],
      every: `${REAPER_EVERY_SECONDS} seconds`, // default grace (300 s): it guards untagged trainers only
    });
    try {
      const took = await waitUntil(
        'the reaper to deactivate the orphan',
        async () => !(await ledger(emulator)).active.includes(resourceId!),
        (REAPER_EVERY_SECONDS + 30) * 1000,
      );
      process.stderr.write(
        `[reaper] terminated round's trainer reaped ${took} ms after the reaper schedule started (period ${REAPER_EVERY_SECONDS} s)\n`,
      );
      const runs = await schedule.describe();
      const last = runs.info.recentActions[runs.info.recentActions.length - 1]!;
      const result = await temporal.client.workflow.getHandle(last.action.workflow.workflowId).result();
      expect(result).toHaveProperty('checked');
    } finally {
      await schedule.delete();
    }
  });
});

test('terminating a campaign cancels its running round (REQUEST_CANCEL), which releases its trainer', async () => {
  const taskQueue = uniqueTaskQueue('reaper-campaign');
  const { spec, dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 400, evalRows: 4, yaml: 'rounds: { max: 2 }' });
  const campaignId = `term-${taskQueue}`;
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  await worker.runUntil(async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: dir } satisfies CampaignInput],
    });
    await waitUntil('training', async () => (await handle.query(campaignProgressQuery)).currentRound?.phase === 'training', 30_000);
    const { resourceId } = (await handle.query(campaignProgressQuery)).currentRound!;
    terminateWithCli(campaignId);
    const took = await waitUntil(
      'the round to release its trainer',
      async () => !(await ledger(emulator)).active.includes(resourceId!),
      30_000,
    );
    process.stderr.write(`[reaper] campaign terminated → its round released the trainer in ${took} ms\n`);
    // The round released its trainer first, then writes its report and closes as cancelled.
    const round = temporal.client.workflow.getHandle(`${campaignId}-round-1`);
    await waitUntil('the round to close', async () => (await round.describe()).status.name !== 'RUNNING', 30_000);
    expect((await round.describe()).status.name).toBe('CANCELLED');
  });
});

test('a retraining schedule starts campaigns with distinct ids and skips a run while one is still going (overlap SKIP)', async () => {
  const taskQueue = uniqueTaskQueue('schedule');
  const { spec, dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 200, evalRows: 4, yaml: 'rounds: { max: 1 }' });
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  await worker.runUntil(async () => {
    const schedule = await upsertCampaignSchedule(temporal.client, {
      scheduleId: `retrain-${taskQueue}`,
      spec,
      taskQueue,
      reportRoot: dir,
      every: '2 seconds',
    });
    try {
      await waitUntil(
        'a skipped overlap and a second run',
        async () => {
          const d = await schedule.describe();
          return d.info.numActionsSkippedOverlap > 0 && d.info.recentActions.length >= 2;
        },
        60_000,
      );
      const d = await schedule.describe();
      expect(d.policies.overlap).toBe('SKIP');
      const ids = d.info.recentActions.map((a) => a.action.workflow.workflowId);
      expect(new Set(ids).size).toBe(ids.length); // each run is a distinct campaign
      expect(ids.every((id) => id.startsWith(`retrain-${taskQueue}`))).toBe(true);
      await schedule.pause('test done');
      expect((await schedule.describe()).state.paused).toBe(true);
      const first = await temporal.client.workflow.getHandle(ids[0]!).result();
      expect(first.campaignId).toBe(ids[0]);
      expect(first.rounds[0]!.status).toBe('completed');
    } finally {
      await schedule.pause('cleaning up').catch(() => undefined);
      const d = await schedule.describe();
      const started = new Set([...d.info.recentActions.map((a) => a.action), ...d.info.runningActions].map((a) => a.workflow.workflowId));
      await schedule.delete();
      // Cancel whatever still runs and wait for each to finish its cleanup (the worker is still running here).
      for (const id of started) {
        const handle = temporal.client.workflow.getHandle(id);
        await handle.cancel().catch(() => undefined);
        await handle.result().catch(() => undefined);
      }
      await waitUntil('nothing active', async () => (await ledger(emulator)).active.length === 0, 60_000).catch(async (err) => {
        const l = await ledger(emulator);
        process.stderr.write(
          `[debug] started ${[...started].join(',')}\nactive ${JSON.stringify(l.resources.filter((r) => l.active.includes(r.id)))}\nsessions ${JSON.stringify(l.sessions.filter((x) => l.active.includes(x.resourceId)))}\n`,
        );
        throw err;
      });
    }
  });
});

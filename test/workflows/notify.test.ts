import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { signatureOf } from '../../activities/notify';
import { campaignProgressQuery, stopCampaignUpdate, type CampaignInput, type CampaignResult } from '../../workflows/campaign/contract';
import { championPath } from '../../activities/promotion';
import { storeFor } from '../../config/io/artifacts';
import { NOTIFY_EVENTS } from '../../config/io/spec-campaign';
import { approvePromotionUpdate } from '../../workflows/campaign/promotion-contract';
import { upsertCampaignSchedule, campaignSchedules } from '../../workers/schedules';
import { renderScheduleHealth } from '../../cli/schedule';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import { startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { freePort } from '../helpers/ports';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';
import { campaignWorkflow, reaperWorkflow } from '../../workflows';

// Notifications (`notify`): a webhook receiver on loopback records every request; after dropping repeats by their
// Idempotency-Key it must hold each event exactly once, signed with the worker's secret.

const SECRET = 'test-webhook-secret';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;

beforeAll(async () => {
  process.env.ROUNDHOUSE_WEBHOOK_SECRET = SECRET; // the in-process worker's environment
  [temporal, bundle, emulator] = await Promise.all([
    connectTestTemporal(),
    bundleWorkflows(),
    startTestEmulator({ provisioningDelayMs: 50 }),
  ]);
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-notify-')) });
});

afterAll(async () => {
  delete process.env.ROUNDHOUSE_WEBHOOK_SECRET;
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

interface Received {
  key: string;
  event: string;
  signature?: string;
  body: string;
}

/** A webhook receiver: records every request; `answer` decides each status on arrival (default 200); `hold` delays it. */
async function receiver(answer: (r: Received, seen: number) => number = () => 200, holdMs = 0) {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const r: Received = {
        key: String(req.headers['idempotency-key']),
        event: String(req.headers['x-roundhouse-event']),
        signature: req.headers['x-roundhouse-signature'] as string | undefined,
        body,
      };
      const seen = received.filter((x) => x.key === r.key).length;
      received.push(r);
      // Decided on arrival (a test may kill the sender here), answered after the hold.
      const status = answer(r, seen);
      setTimeout(() => {
        res.statusCode = status;
        res.end();
      }, holdMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    /** Each key once: what the receiver keeps after dropping repeats. */
    deduped: () => [...new Map(received.map((r) => [r.key, r])).values()],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function notifyingCampaign(label: string, notify: string, extra = ''): CampaignInput {
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: `rounds: { max: 1 }\nnotify: ${notify}\n${extra}`,
  });
  const campaignId = `notify-${label}-${Date.now()}`;
  return { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
}

async function until(what: string, check: () => boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('each event reaches the webhook once after dedupe by key, signed; a 503 is retried; the Slack body is {text}', async () => {
  // The first delivery of every key is answered 503: the retry delivers it again, under the same key.
  const hook = await receiver((_r, seen) => (seen === 0 ? 503 : 200));
  const slack = await receiver();
  const taskQueue = uniqueTaskQueue('notify');
  const input = notifyingCampaign('ok', `{ webhook: "${hook.url}" }`, `promotion: { line: notify-${Date.now()}, on: eval }`);
  const slackInput = notifyingCampaign('slack', `{ webhook: "${slack.url}", format: slack, events: [campaign.completed] }`);
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  try {
    const [result] = await worker.runUntil(async () => {
      const results = await Promise.all(
        [input, slackInput].map((i) =>
          temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: i.campaignId!, args: [i] }),
        ),
      );
      await until('both events delivered twice (503, then 200)', () => hook.received.length >= 4);
      await until('the slack event delivered', () => slack.received.length >= 1);
      return results as CampaignResult[];
    });
    expect(result!.status).toBe('completed');
    expect(
      hook
        .deduped()
        .map((r) => r.event)
        .sort(),
    ).toEqual(['campaign.completed', 'promotion.promoted']);
    expect(hook.received.map((r) => r.key).sort()).toEqual([
      `${input.campaignId}/campaign.completed`,
      `${input.campaignId}/campaign.completed`,
      `${input.campaignId}/promotion.promoted`,
      `${input.campaignId}/promotion.promoted`,
    ]);
    for (const r of hook.received) {
      expect(r.signature).toBe(signatureOf(SECRET, r.body));
      const body = JSON.parse(r.body) as { id: string; type: string; campaignId: string; text: string };
      expect(body).toMatchObject({ id: r.key, type: r.event, campaignId: input.campaignId });
    }
    const completed = JSON.parse(hook.deduped().find((r) => r.event === 'campaign.completed')!.body) as {
      text: string;
      data: { status: string };
    };
    expect(completed.data.status).toBe('completed');
    expect(completed.text).toMatch(
      new RegExp(`campaign ${input.campaignId} completed \\(rounds\\.max \\(1\\) reached\\): 1 round\\(s\\); best round 1`),
    );
    expect(slack.received).toHaveLength(1);
    expect(Object.keys(JSON.parse(slack.received[0]!.body) as object)).toEqual(['text']);
  } finally {
    await hook.close();
    await slack.close();
  }
}, 180_000);

test('a dead webhook leaves the campaign unaffected: it completes, the notification keeps retrying on its own', async () => {
  const dead = `http://127.0.0.1:${await freePort()}/hook`; // nothing listens there
  const taskQueue = uniqueTaskQueue('notify-dead');
  const input = notifyingCampaign('dead', `{ webhook: "${dead}", events: [campaign.completed] }`);
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  const result: CampaignResult = await worker.runUntil(
    temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] }),
  );
  expect(result.status).toBe('completed');
  const notification = temporal.client.workflow.getHandle(`notify:${input.campaignId}/campaign.completed`);
  expect((await notification.describe()).status.name).toBe('RUNNING'); // still retrying, apart from the campaign
  await notification.terminate('test cleanup');
}, 120_000);

test('a worker SIGKILLed right after sending: the retry sends the same key again, and dedupe keeps one', async () => {
  let kill: (() => void) | undefined;
  const sent = new Promise<void>((resolve) => (kill = resolve));
  // The receiver holds its answer 3 s: the worker is killed after the request arrived and before it heard back.
  const hook = await receiver((_r, seen) => {
    if (seen === 0) kill!();
    return 200;
  }, 3_000);
  const taskQueue = uniqueTaskQueue('notify-kill');
  const env = { ...crashTestWorkerEnv(taskQueue, await bundleToFile()), ROUNDHOUSE_WEBHOOK_SECRET: SECRET };
  const input = notifyingCampaign('kill', `{ webhook: "${hook.url}", events: [campaign.completed] }`);
  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] });
    await sent;
    await worker.kill();
    worker = startWorkerProcess(env);
    await worker.ready;
    expect((await handle.result()).status).toBe('completed');
    await until('the notification sent again by the retry', () => hook.received.length >= 2, 90_000);
    expect(hook.received.map((r) => r.key)).toEqual([`${input.campaignId}/campaign.completed`, `${input.campaignId}/campaign.completed`]);
    expect(hook.received[1]!.body).toBe(hook.received[0]!.body); // the same event, byte for byte
    expect(hook.deduped()).toHaveLength(1);
    const notification = temporal.client.workflow.getHandle(`notify:${input.campaignId}/campaign.completed`);
    await notification.result();
  } finally {
    await worker.kill();
    await hook.close();
  }
}, 180_000);

test('a scheduled line whose run is still going skips the next tick: told once per skip count by the reaper, shown by schedule list', async () => {
  const hook = await receiver();
  const taskQueue = uniqueTaskQueue('notify-schedule');
  const line = `scheduled-${Date.now()}`;
  // Each run waits for a manual approval (an hour): the first one blocks the schedule, and its ticks are skipped.
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: `rounds: { max: 1 }
promotion: { line: ${line}, on: eval, approval: manual, approvalTimeout: 1h }
notify: { webhook: "${hook.url}", events: [schedule.skipped] }`,
  });
  const reportRoot = testReportDir(path.join(dir, 'campaigns'));
  const scheduleId = `line-${taskQueue}`;
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  try {
    await worker.runUntil(async () => {
      const schedule = await upsertCampaignSchedule(temporal.client, { scheduleId, spec, taskQueue, reportRoot, every: '2 seconds' });
      try {
        const deadline = Date.now() + 90_000;
        while ((await schedule.describe()).info.numActionsSkippedOverlap < 1 && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 250));
        await schedule.pause('the test looks now');
        const skipped = (await schedule.describe()).info.numActionsSkippedOverlap;
        expect(skipped).toBeGreaterThanOrEqual(1);
        // Two reaper passes (dry run: nothing to reap here): the skip count is told once.
        const reaperInput = {
          providers: [{ kind: 'local' as const, baseUrl: emulator.url, model: 'roundhouse/tiny-chat' }],
          graceSeconds: 300,
          dryRun: true,
        };
        for (const pass of [1, 2])
          await temporal.client.workflow.execute(reaperWorkflow, {
            taskQueue,
            workflowId: `reaper-${taskQueue}-${pass}`,
            args: [reaperInput],
          });
        await until('the skipped run told', () => hook.received.length >= 1);
        await new Promise((r) => setTimeout(r, 1_000));
        expect(hook.received.map((r) => r.key)).toEqual([`${scheduleId}/schedule.skipped/${skipped}`]);
        expect(JSON.parse(hook.received[0]!.body)).toMatchObject({ type: 'schedule.skipped', data: { scheduleId, skipped } });

        const [health] = (await campaignSchedules(temporal.client, taskQueue)).map((s) => s.health);
        expect(health).toMatchObject({ scheduleId, paused: true, skipped, lastRun: { status: 'running' }, line: { name: line } });
        expect(health!.line!.champion).toBeUndefined();
        const text = renderScheduleHealth(health!);
        expect(text).toContain(`skipped ${skipped} run(s) while the previous one still ran (running: ${health!.running[0]})`);
        expect(text).toContain(`line ${line}: no champion yet`);

        // Approved: the run promotes and ends; the list shows the line's champion and when it changed.
        const run = temporal.client.workflow.getHandle(health!.running[0]!);
        for (let i = 0; i < 240; i++) {
          const p = await run.query(campaignProgressQuery);
          if (p.promotion?.status === 'pending-approval') break;
          await new Promise((r) => setTimeout(r, 250));
        }
        await run.executeUpdate(approvePromotionUpdate, { args: [{ by: 'ops' }] });
        await run.result();
        const [after] = (await campaignSchedules(temporal.client, taskQueue)).map((s) => s.health);
        expect(after!.lastRun!.status).toBe('completed');
        expect(after!.line!.champion).toMatchObject({ campaignId: run.workflowId, changes: 1 });
        expect(renderScheduleHealth(after!)).toMatch(
          new RegExp(`line ${line}: champion \\S+ \\(round 1 of ${run.workflowId}\\), since \\d{4}-`),
        );
      } finally {
        await schedule.pause('cleaning up').catch(() => undefined);
        const d = await schedule.describe();
        const started = new Set([...d.info.recentActions.map((a) => a.action), ...d.info.runningActions].map((a) => a.workflow.workflowId));
        await schedule.delete();
        for (const id of started)
          await temporal.client.workflow
            .getHandle(id)
            .terminate('test cleanup')
            .catch(() => undefined);
      }
    });
  } finally {
    await hook.close();
  }
}, 180_000);

test('the other events reach the webhook: pending, rejected and stopped (a stop while it waits), kept, and failed for the campaign’s own failure', async () => {
  const hook = await receiver();
  const taskQueue = uniqueTaskQueue('notify-other');
  const stamp = Date.now();
  const notify = `{ webhook: "${hook.url}" }`;
  const stop = notifyingCampaign('stop', notify, `promotion: { line: stop-${stamp}, on: eval, approval: manual, approvalTimeout: 1h }`);
  const failing = notifyingCampaign('fail', notify, `promotion: { line: fail-${stamp}, on: eval }`);
  const champion = notifyingCampaign('champion', notify, `promotion: { line: kept-${stamp}, on: eval }`);
  const kept = notifyingCampaign('kept', notify, `promotion: { line: kept-${stamp}, on: eval, minGain: 1 }`);
  kept.reportRoot = champion.reportRoot; // one line, one store
  // The promotion throws (the line's champion record is not JSON): the campaign fails, and says so first.
  const corrupt = championPath(failing.reportRoot, `fail-${stamp}`, 1);
  await storeFor(corrupt).write(corrupt, '{ "line": ');
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  try {
    const failure = await worker.runUntil(async () => {
      const start = (i: CampaignInput) =>
        temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: i.campaignId!, args: [i] });
      const [stopped, failed, first] = await Promise.all([start(stop), start(failing), start(champion)]);
      for (let i = 0; i < 1200 && (await stopped.query(campaignProgressQuery)).promotion?.status !== 'pending-approval'; i++)
        await new Promise((r) => setTimeout(r, 250));
      await stopped.executeUpdate(stopCampaignUpdate, { args: [{ mode: 'after-round' }] });
      expect((await stopped.result()).status).toBe('stopped');
      expect((await first.result()).promotion?.status).toBe('promoted');
      expect((await (await start(kept)).result()).promotion?.status).toBe('kept');
      const error = await failed.result().then(
        () => undefined,
        (err: Error) => err,
      );
      await until('every event told', () => hook.deduped().length >= 7);
      return error;
    });
    expect(failure).toBeDefined();
    const told = (id: string) =>
      hook
        .deduped()
        .filter((r) => r.key.startsWith(`${id}/`))
        .map((r) => r.event)
        .sort();
    expect(told(stop.campaignId!)).toEqual(['campaign.stopped', 'promotion.pending', 'promotion.rejected']);
    expect(told(champion.campaignId!)).toEqual(['campaign.completed', 'promotion.promoted']);
    expect(told(kept.campaignId!)).toEqual(['campaign.completed', 'promotion.kept']);
    expect(told(failing.campaignId!)).toEqual(['campaign.failed']);
    const failed = JSON.parse(hook.deduped().find((r) => r.event === 'campaign.failed')!.body) as {
      text: string;
      data: { status: string };
    };
    expect(failed.data.status).toBe('failed');
    expect(failed.text).toContain("the line's champion record is not JSON");
    // With the first test (completed, promoted), capacity.test.ts (capacity.waiting) and the schedule test
    // (schedule.skipped), every event of the notify contract reaches a receiver.
    const elsewhere = ['capacity.waiting', 'schedule.skipped'];
    expect([...new Set([...hook.deduped().map((r) => r.event), ...elsewhere])].sort()).toEqual([...NOTIFY_EVENTS].sort());
  } finally {
    await hook.close();
  }
}, 300_000);

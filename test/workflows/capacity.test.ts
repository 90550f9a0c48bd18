import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { renderProgress } from '../../cli/progress';
import { campaignWorkflow } from '../../workflows';
import { campaignProgressQuery, type CampaignInput } from '../../workflows/campaign/contract';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, setFaults } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// A create the provider queues for capacity, or gives up on (CAPACITY_WAIT_TIMEOUT): the round waits, creating again
// with backoff, until advanced.provisionTimeoutMinutes; `status` says it waits (with the queue position); past the
// limit the round fails cleanly with nothing active.
const { env, runRound, withWorker } = roundTestEnvironment(
  { provisioningDelayMs: 50 },
  { ...process.env, BASETEN_API_KEY: 'bt-capacity-key' },
);

afterEach(async () => {
  await setFaults(env.emulator, {});
});

const resourcesSince = async (before: Set<string>) => (await ledger(env.emulator)).resources.filter((r) => !before.has(r.id));
const resourceIds = async () => new Set((await ledger(env.emulator)).resources.map((r) => r.id));

test('a create that times out waiting for capacity, then one that queues: the round waits, status says so, and it completes on one trainer', async () => {
  const taskQueue = uniqueTaskQueue('capacity');
  await setFaults(env.emulator, {
    rules: [
      { kind: 'capacity-timeout', max: 1, durationMs: 2500, queuePosition: 4 },
      { kind: 'capacity-queue', max: 1, durationMs: 6000, queuePosition: 3 },
    ],
  });
  const before = await resourceIds();
  // A webhook on loopback: told once the wait passes 3 s (`capacity.waiting`).
  const told: { key: string; body: string }[] = [];
  const hook = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      told.push({ key: String(req.headers['idempotency-key']), body });
      res.end();
    });
  });
  await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 20,
    evalRows: 4,
    yaml: `rounds: { max: 1, nextData: { policy: static } }
notify: { webhook: "http://127.0.0.1:${(hook.address() as AddressInfo).port}/", events: [capacity.waiting], capacityWaitMinutes: 0.05 }`,
  });
  const campaignId = `capacity-${taskQueue}`;
  const shown: string[] = [];
  const result = await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: path.join(dir, 'campaigns') } satisfies CampaignInput],
    });
    const done = handle.result();
    let finished = false;
    void done.finally(() => (finished = true)).catch(() => undefined);
    for (let i = 0; i < 600 && !finished; i++) {
      const text = renderProgress(await handle.query(campaignProgressQuery));
      const line = text.split('\n').find((l) => l.includes('waiting for capacity'));
      if (line && shown.at(-1) !== line.trim()) shown.push(line.trim());
      await new Promise((r) => setTimeout(r, 200));
    }
    return done;
  });
  process.stderr.write(`[capacity] status said: ${shown.join(' | ')}\n`);
  expect(result.status).toBe('completed');
  // While the first create waited, then after the provider gave up on it and the second one queued.
  expect(shown.some((l) => /waiting for capacity \(queue position [1-4]\)/.test(l))).toBe(true);
  expect(shown.some((l) => /waiting for capacity \(queue position [1-3]\), [\d.]+ min, create 2/.test(l))).toBe(true);
  const round = result.rounds[0]!;
  const report = JSON.parse(fs.readFileSync(round.reportPath, 'utf8'));
  expect(report.capacity_waits).toHaveLength(1);
  expect(report.capacity_waits[0].creates).toBe(2);
  expect(report.capacity_waits[0].waited_minutes).toBeGreaterThan(6000 / 60_000);

  const created = await resourcesSince(before);
  expect(created).toHaveLength(2);
  expect(created.find((r) => r.error === 'CAPACITY_WAIT_TIMEOUT')?.gpuSeconds).toBe(0); // never ran, never billed
  expect(created.filter((r) => r.error === null)).toHaveLength(1);
  expect((await ledger(env.emulator)).active).toEqual([]);
  for (let i = 0; i < 100 && told.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
  hook.close();
  expect(told.map((t) => t.key)).toEqual([`${campaignId}/capacity.waiting/r1`]);
  expect(JSON.parse(told[0]!.body)).toMatchObject({ type: 'capacity.waiting', data: { round: 1, waiting: { for: 'capacity' } } });
  expect(JSON.parse(told[0]!.body).text).toMatch(
    /round 1 has waited [\d.]+ min for local's capacity \(roundhouse\/tiny-chat, queue position \d/,
  );
});

test('no capacity within advanced.provisionTimeoutMinutes: the round fails with CapacityUnavailable and nothing is left active', async () => {
  const taskQueue = uniqueTaskQueue('capacity-timeout');
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-timeout', max: 100, durationMs: 1500, queuePosition: 2 }] });
  const before = await resourceIds();
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `capacity-timeout-${taskQueue}`, trainRows: 16, evalRows: 2 });
  input.spec.advanced = { ...input.spec.advanced, provisionTimeoutMinutes: 0.1 };
  const started = Date.now();
  const error = await runRound(input, taskQueue).catch((err: unknown) => err);
  const elapsedMs = Date.now() - started;
  expect(error).toBeInstanceOf(WorkflowFailedError);
  const failure = (error as WorkflowFailedError).cause;
  expect(failure?.message).toMatch(
    /no capacity for roundhouse\/tiny-chat within advanced\.provisionTimeoutMinutes \(0\.1 min, \d+ creates\)/,
  );
  const report = JSON.parse(fs.readFileSync(path.join(input.reportDir, 'round-1.json'), 'utf8'));
  expect(report).toMatchObject({ status: 'failed', error_type: 'CapacityUnavailable', steps_applied: 0 });
  // It kept trying until the limit (6 s), not past it by more than a poll and a create.
  expect(elapsedMs).toBeGreaterThan(6000);
  const created = await resourcesSince(before);
  expect(created.length).toBeGreaterThanOrEqual(2);
  expect(created.every((r) => r.gpuSeconds === 0)).toBe(true);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('Baseten: a run that fails for capacity (CAPACITY_WAIT_TIMEOUT) is created again, and the round completes on the new one', async () => {
  const taskQueue = uniqueTaskQueue('capacity-baseten');
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-timeout', dialect: 'baseten', max: 1, durationMs: 1500 }] });
  const before = await resourceIds();
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `capacity-bt-${taskQueue}`, trainRows: 16, evalRows: 2 });
  input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: env.emulator.url };
  const result = await runRound(input, taskQueue);
  expect(result.status).toBe('completed');
  expect(result.capacityWaits).toEqual([{ creates: 2, waitedMinutes: expect.any(Number) as number }]);
  const created = await resourcesSince(before);
  expect(created.map((r) => r.error)).toEqual(expect.arrayContaining(['CAPACITY_WAIT_TIMEOUT', null]));
  expect(created).toHaveLength(2);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

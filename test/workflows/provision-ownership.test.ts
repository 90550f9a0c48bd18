import fs from 'node:fs';
import { ownerOfTag } from '../../config/rules/owner-tag';
import { ACQUIRE_GATE_UPDATE, provisionGateWorkflowId } from '../../config/rules/provision-gate';
import { ProvisionGateHold } from '../../activities/provision-gate';
import { createRoundhouseWorker } from '../../workers/worker';
import { provisionGateWorkflow, roundWorkflow } from '../../workflows';
import {
  acquireGateUpdate,
  provisionGateStateQuery,
  releaseGateUpdate,
  type AcquireGateRequest,
  type GateLease,
} from '../../workflows/provision-gate/contract';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Every round of this file uses the worker's local key: one emulator account, as rounds of one deployment share one.
const { env } = roundTestEnvironment({ provisioningDelayMs: 300 });

const ROUNDS = 8;
const RESOURCE_CREATE = '/v1/rl/model-resources$';

test(`${ROUNDS} rounds provisioning at once on one account, creates answered with lost responses and 5xx: each trains on its own trainer, and none is left billing`, async () => {
  await setFaults(env.emulator, {
    seed: 15,
    rules: [
      { kind: 'lose-response', method: 'POST', path: RESOURCE_CREATE, rate: 0.4, max: 5 },
      { kind: 'http-500', method: 'POST', path: RESOURCE_CREATE, rate: 0.3, max: 3 },
      { kind: 'http-503', method: 'POST', path: RESOURCE_CREATE, rate: 0.3, max: 3, retryAfterMs: 5 },
    ],
  });
  const taskQueue = uniqueTaskQueue('ownership');
  const inputs = Array.from({ length: ROUNDS }, (_, i) => {
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `own-${taskQueue}-${i}`, trainRows: 16, evalRows: 4 });
    input.spec.training.epochs = 1; // 2 steps: the test is about provisioning
    return input;
  });
  const provider = await env.providers.providerFor(inputs[0]!.spec.provider);
  const gateId = provisionGateWorkflowId({
    taskQueue,
    provider: provider.kind,
    account: provider.account,
    model: inputs[0]!.spec.provider.model,
  });
  const worker = await workerOn(taskQueue);
  const started = Date.now();
  const { results, gate } = await worker.runUntil(async () => {
    const results: RoundResult[] = await Promise.all(
      inputs.map((input) =>
        env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
      ),
    );
    const gate = await env.temporal.client.workflow
      .getHandle(gateId)
      .query(provisionGateStateQuery)
      .catch(() => undefined); // asserted last: the ledger says first whether ownership held
    return { results, gate };
  });
  const seconds = (Date.now() - started) / 1000;
  const faults = ((await (await fetch(`${env.emulator.url}/_emulator/faults`)).json()) as { fired: { kind: string; fired: number }[] })
    .fired;
  const firedOf = (kind: string) => faults.filter((f) => f.kind === kind).reduce((a, f) => a + f.fired, 0);
  // The faults happened: creates were lost after they were applied, and refused with 5xx.
  expect(firedOf('lose-response')).toBeGreaterThan(0);
  expect(firedOf('http-500') + firedOf('http-503')).toBeGreaterThan(0);

  const reports = results.map((r) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8')) as { workflow_id: string; resource_id: string });
  const book = await ledger(env.emulator);
  const trainersOf = new Map<string, Set<string>>(); // resource → the rounds whose sessions trained on it
  for (const s of book.sessions.filter((s) => s.optimizerSteps > 0)) {
    const owner = ownerOfTag(s.displayName ?? undefined) ?? `untagged session ${s.id}`;
    trainersOf.set(s.resourceId, (trainersOf.get(s.resourceId) ?? new Set()).add(owner));
  }
  const summary = {
    statuses: results.map((r) => r.status),
    resourceIds: reports.map((r) => r.resource_id),
    sharedResources: [...trainersOf].filter(([, owners]) => owners.size > 1).map(([id, owners]) => `${id}: ${[...owners].join(', ')}`),
    active: book.active,
    resourcesCreated: book.resources.length,
    faults: faults.map((f) => `${f.kind}=${f.fired}`).join(' '),
    gateGrants: gate?.grants.length,
    seconds,
  };
  process.stderr.write(`[provision-ownership] ${JSON.stringify(summary)}\n`);

  expect(summary.statuses).toEqual(Array(ROUNDS).fill('completed'));
  // One trainer each, none shared: the reported trainers are distinct, and each was trained on by its round alone.
  expect(new Set(summary.resourceIds).size).toBe(ROUNDS);
  expect(summary.sharedResources).toEqual([]);
  for (const report of reports) expect([...(trainersOf.get(report.resource_id) ?? [])]).toEqual([report.workflow_id]);
  // No orphan: every resource created on the account was deactivated, including any a lost create made.
  expect(book.active).toEqual([]);
  expect(book.resources.filter((r) => !['STOPPED', 'STOPPING'].includes(r.status))).toEqual([]);

  // The account's gate granted every create, each grant settled with the trainer its round kept (or with none).
  expect(gate).toBeDefined();
  expect(gate!.holder).toBeUndefined();
  expect(gate!.grants.every((g) => g.settled)).toBe(true);
  expect(new Set(gate!.grants.flatMap((g) => (g.resourceId ? [g.resourceId] : [])))).toEqual(new Set(summary.resourceIds));
  expect(gateId).not.toContain('roundhouse-local'); // the account is a fingerprint, never the key
});

test('the provision gate: one holder at a time, reentrant for its owner; a dead holder is let go when its lease runs out, and what others created since is known across continue-as-new', async () => {
  const taskQueue = uniqueTaskQueue('gate');
  const worker = await workerOn(taskQueue);
  await worker.runUntil(async () => {
    const workflowId = `gate-${taskQueue}`;
    await env.temporal.client.workflow.start(provisionGateWorkflow, { taskQueue, workflowId, args: [{ maxHistoryEvents: 150 }] });
    const gate = env.temporal.client.workflow.getHandle(workflowId); // the latest run, across continue-as-new
    const acquire = (owner: string, extra: Partial<AcquireGateRequest> = {}) =>
      gate.executeUpdate(acquireGateUpdate, { args: [{ owner, leaseSeconds: 2, waitSeconds: 0, ...extra }] });
    const leaseOf = async (owner: string, extra: Partial<AcquireGateRequest> = {}) => {
      const result = await acquire(owner, extra);
      if (!result.granted) throw new Error(`${owner} was not granted the gate (held by ${result.holder})`);
      return result;
    };
    const release = (owner: string, lease: GateLease, resourceId?: string) =>
      gate.executeUpdate(releaseGateUpdate, { args: [{ owner, lease, resourceId }] });

    const a = await leaseOf('round-a');
    // A busy gate takes a waiter into its line and says when to ask again; asking again keeps the same place.
    const firstAnswer = await acquire('round-b');
    expect(firstAnswer).toMatchObject({ granted: false, holder: 'round-a', waiting: 1 });
    for (let i = 0; i < 4; i++) expect(await acquire('round-b')).toMatchObject({ granted: false, waiting: 1 });
    const behind = await acquire('round-e');
    expect(behind).toMatchObject({ granted: false, waiting: 2 });
    // Two places ahead (the holder and round-b) are told to wait longer than one.
    expect(!behind.granted && !firstAnswer.granted && behind.retryAfterMs! > firstAnswer.retryAfterMs!).toBe(true);
    expect((await gate.query(provisionGateStateQuery)).waiting).toEqual(['round-b', 'round-e']);
    expect((await leaseOf('round-a')).lease).toEqual(a.lease); // a retried attempt gets its lease back at once

    // round-a dies holding the gate: when its lease runs out, round-b, first in line, gets it, though round-e asks
    // first each time.
    const waitStarted = Date.now();
    let b: Awaited<ReturnType<typeof leaseOf>> | undefined;
    while (!b && Date.now() - waitStarted < 10_000) {
      expect((await acquire('round-e')).granted).toBe(false);
      b = await leaseOf('round-b').catch(() => undefined);
      if (!b) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (!b) throw new Error('round-b never got the gate');
    expect(Date.now() - waitStarted).toBeGreaterThan(1000);
    expect(b.lease.generation).toBe(a.lease.generation + 1);
    await release('round-b', b.lease, 'mr-b');
    const e = await leaseOf('round-e'); // next in line; it creates nothing
    expect(e.lease.generation).toBe(b.lease.generation + 1);
    await release('round-e', e.lease);

    // round-a's retry learns what others created since its listing: round-b's trainer, nothing unaccounted for.
    const a2 = await leaseOf('round-a', { since: a.lease });
    expect(a2.othersSince).toEqual({ claimed: ['mr-b'], uncertain: false });
    await release('round-a', a2.lease, 'mr-a');

    // round-c's lease runs out unsettled: an untagged resource since can no longer be attributed by the gate…
    const c = await leaseOf('round-c', { leaseSeconds: 1 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const a3 = await leaseOf('round-a', { since: a2.lease });
    expect(a3.othersSince).toEqual({ claimed: [], uncertain: true });
    await release('round-a', a3.lease);
    // …until round-c's retry says what it created.
    await release('round-c', c.lease, 'mr-c');
    const a4 = await leaseOf('round-a', { since: a2.lease });
    expect(a4.othersSince).toEqual({ claimed: ['mr-c'], uncertain: false });
    await release('round-a', a4.lease);

    // Many grants later the gate has continued as new, with the same epoch and the memory of grants.
    const firstRun = (await gate.describe()).runId;
    const created: string[] = [];
    for (let i = 0; i < 40 && (await gate.describe()).runId === firstRun; i++) {
      const d = await leaseOf(`round-d${i}`);
      created.push(`mr-d${i}`);
      await release(`round-d${i}`, d.lease, `mr-d${i}`);
    }
    expect((await gate.describe()).runId).not.toBe(firstRun);
    const after = await leaseOf('round-a', { since: a4.lease });
    expect(after.lease.epoch).toBe(a.lease.epoch);
    expect(after.lease.generation).toBe(a4.lease.generation + created.length + 1);
    expect(after.othersSince).toEqual({ claimed: created, uncertain: false });
    await release('round-a', after.lease);
    expect((await gate.query(provisionGateStateQuery)).holder).toBeUndefined();
  });
});

const WAITERS = 60;

test(`${WAITERS} provisionings waiting on one gate at once: each holds it alone, in turn, and every grant is settled`, async () => {
  const taskQueue = uniqueTaskQueue('gate-line');
  const key = { taskQueue, provider: 'together', account: 'acct-line', model: 'roundhouse/tiny-chat' };
  const worker = await workerOn(taskQueue);
  const holds: { owner: string; from: number; to: number; generation: number }[] = [];
  const gate = env.temporal.client.workflow.getHandle(provisionGateWorkflowId(key));
  const started = Date.now();
  const state = await worker.runUntil(async () => {
    await Promise.all(
      Array.from({ length: WAITERS }, async (_v, i) => {
        const owner = `round-line-${i}`;
        const hold = await ProvisionGateHold.acquire(env.temporal.client, { gate: key, owner, leaseSeconds: 30, provisioning: `p-${i}` });
        const from = Date.now();
        await new Promise((resolve) => setTimeout(resolve, 20)); // list and create
        const to = Date.now();
        await hold.release(`mr-line-${i}`);
        holds.push({ owner, from, to, generation: hold.lease.generation });
      }),
    );
    return gate.query(provisionGateStateQuery);
  });
  // Every grant settled with its trainer (no lease ran out), one per provisioning, nobody left in line.
  expect(state.grants.filter((g) => g.settled && g.resourceId).length).toBe(WAITERS);
  expect(state.waiting).toEqual([]);
  // One holder at a time.
  const byTime = [...holds].sort((x, y) => x.generation - y.generation);
  for (let i = 1; i < byTime.length; i++) expect(byTime[i]!.from).toBeGreaterThanOrEqual(byTime[i - 1]!.to);
  // Waiting costs a few asks each, not one every second or two: the acquires the gate accepted, over the waiters.
  const history = await gate.fetchHistory();
  const acquires = (history.events ?? []).filter(
    (e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === ACQUIRE_GATE_UPDATE,
  ).length;
  process.stderr.write(
    `[gate-line] ${WAITERS} waiters in ${Date.now() - started} ms: ${acquires} acquires accepted, mean hold ${state.meanHoldMs} ms\n`,
  );
  expect(acquires).toBeGreaterThanOrEqual(WAITERS);
  expect(acquires).toBeLessThanOrEqual(WAITERS * 8);
});

function workerOn(taskQueue: string) {
  return createRoundhouseWorker({
    connection: env.temporal.nativeConnection,
    namespace: env.temporal.settings.namespace,
    taskQueue,
    workflowBundle: env.bundle,
    providers: env.providers,
  });
}

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { loadWorkerSettings } from '../../config/io/worker-env';
import { pythonCallOf } from '../../config/rules/python-calls';
import { startTemporal } from '../../workers/temporal-server';
import { pythonCallWorkflow } from '../../workflows';
import type { PythonCallInput } from '../../workflows/python/contract';
import { findPython } from '../helpers/python-venv';
import { startPythonWorker, type PythonWorker, type WorkerExit } from '../helpers/python-worker';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// How the Python package installs and stops, on real `python -m roundhouse worker` processes: a plain
// `pip install ./python` in a fresh venv serves a call; SIGTERM ends a worker within its grace period with the server
// up, with the server gone, and with a verifiers environment loaded, even while the user's code is still running.
const { env, withWorker } = roundTestEnvironment();

/** The worker's grace period (python/src/roundhouse/worker.py GRACE_SECONDS) and what exit may take past it. */
const GRACE_MS = 10_000;
const EXIT_MS = 5_000;
const ROOT = path.resolve(__dirname, '../..');
const VF_NUMBER_GAME = path.join(ROOT, 'test', 'python', 'vf_number_game.py');
const TEST_FUNCTIONS = path.join(ROOT, 'test', 'python', 'functions.py');
const STUBBORN = path.join(ROOT, 'test', 'python', 'stubborn.py');

const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.kill();
});

async function pythonWorker(options: Parameters<typeof startPythonWorker>[0]): Promise<PythonWorker> {
  const worker = await startPythonWorker(options);
  workers.push(worker);
  return worker;
}

/** A one-sample reward batch in a fresh directory, as a round writes one (python-contract.ts), for the queue's worker. */
function rewardCall(taskQueue: string, name = 'digits_reward'): PythonCallInput {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-py-life-'));
  const items = path.join(dir, 'items.json');
  const item = { key: 's0000000/p0-c0', completion: '4', answer: '4', prompt: '2+2', row: {}, context: { step: 1 } };
  fs.writeFileSync(items, JSON.stringify({ items: [item] }));
  return {
    call: pythonCallOf({ name, taskQueue, heartbeatTimeoutSeconds: 30, workerWaitSeconds: 60 }),
    role: 'reward',
    activity: 'roundhouse.rewards',
    request: { function: name, items, records: path.join(dir, 'records'), concurrency: 1 },
  };
}

/** Waits until the call's activity runs on a Python worker. */
async function untilStarted(handle: WorkflowHandle): Promise<void> {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
    const pending = (await handle.describe()).raw.pendingActivities ?? [];
    if (pending.some((a) => a.state === temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('the Python activity never started');
}

/** SIGTERM, then a clean stop: exit 0 within the grace period (plus what exit takes), no interpreter crash on the way out. */
async function expectCleanStop(worker: PythonWorker): Promise<void> {
  const sent = Date.now();
  await worker.stop();
  const exit: WorkerExit = await worker.exit;
  const ms = exit.at - sent;
  const shown = `exit ${exit.code ?? exit.signal} after ${ms} ms:\n${worker.output().slice(-3000)}`;
  expect({ code: exit.code, signal: exit.signal, shown }).toEqual({ code: 0, signal: null, shown });
  process.stderr.write(`[python stop] ${expect.getState().currentTestName}: exit ${exit.code} ${ms} ms after SIGTERM\n`);
  expect(ms).toBeLessThan(GRACE_MS + EXIT_MS);
  expect(worker.output()).not.toMatch(/Fatal Python error|Segmentation fault|Traceback/);
}

test('a plain `pip install ./python` (no extras) in a fresh venv starts a worker that serves a call and stops on SIGTERM', async () => {
  const started = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-py-install-'));
  // A copy, so pip's in-tree build leaves nothing in the checkout.
  const source = path.join(dir, 'python');
  fs.cpSync(path.join(ROOT, 'python'), source, { recursive: true, filter: (f) => !/(__pycache__|\.egg-info|\/build)$/.test(f) });
  const venv = path.join(dir, 'venv');
  execFileSync(findPython([3, 10]).python, ['-m', 'venv', venv], { stdio: 'inherit' });
  const python = path.join(venv, 'bin', 'python');
  execFileSync(python, ['-m', 'pip', 'install', '--disable-pip-version-check', '-q', source], { stdio: 'inherit', timeout: 600_000 });
  const installed = Date.now() - started;

  const taskQueue = uniqueTaskQueue('py-install');
  const worker = await pythonWorker({
    address: env.temporal.settings.address!,
    taskQueue: `${taskQueue}-py`,
    python,
    sources: [TEST_FUNCTIONS],
  });
  const call = rewardCall(`${taskQueue}-py`);
  const result = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(pythonCallWorkflow, { taskQueue, workflowId: `py-install-${taskQueue}`, args: [call] }),
  );
  expect(result).toMatchObject({ values: [2], computed: 1 });
  await expectCleanStop(worker);
  process.stderr.write(`[python install] fresh venv + pip install ./python: ${installed} ms; in all ${Date.now() - started} ms\n`);
});

test.each([
  ['no environment', [TEST_FUNCTIONS]],
  ['a verifiers environment loaded', [TEST_FUNCTIONS, VF_NUMBER_GAME]],
])(
  'SIGTERM with the server up and a reward still running past the grace period (%s): exit 0 within the grace period',
  async (_, sources) => {
    const taskQueue = uniqueTaskQueue('py-stop');
    // The reward sleeps in a thread for two minutes: the grace period runs out with the user's code still running.
    const worker = await pythonWorker({
      address: env.temporal.settings.address!,
      taskQueue: `${taskQueue}-py`,
      sources,
      env: { ROUNDHOUSE_TEST_REWARD_DELAY: '120' },
    });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(pythonCallWorkflow, {
        taskQueue,
        workflowId: `py-stop-${taskQueue}`,
        args: [rewardCall(`${taskQueue}-py`)],
      });
      await untilStarted(handle);
      await expectCleanStop(worker);
      expect(worker.output()).toMatch(/still running after the grace period: .*asyncio/);
      await handle.terminate('test over');
    });
  },
);

test('SIGTERM after the Temporal server has gone: exit 0 within the grace period, no interpreter crash', async () => {
  // A server of this test's own, so it can be stopped under the worker.
  const server = await startTemporal({ ...loadWorkerSettings(), address: undefined });
  let stopped = false;
  try {
    const taskQueue = uniqueTaskQueue('py-server-gone');
    const worker = await pythonWorker({
      address: server.address,
      taskQueue,
      sources: [TEST_FUNCTIONS, VF_NUMBER_GAME],
      env: { TEMPORAL_NAMESPACE: server.namespace },
    });
    // The worker polls; the server goes; the worker's polls fail for a while before it is told to stop.
    const connection = await Connection.connect({ address: server.address });
    const client = new Client({ connection, namespace: server.namespace });
    await client.workflowService.getSystemInfo({});
    await connection.close();
    await server.stop();
    stopped = true;
    await new Promise((r) => setTimeout(r, 5_000));
    await expectCleanStop(worker);
  } finally {
    if (!stopped) await server.stop();
  }
});

test('a stop that cannot finish (a call that ignores cancellation) is ended by the watchdog: exit 1, 14 s after SIGTERM, saying why', async () => {
  const taskQueue = uniqueTaskQueue('py-stubborn');
  const worker = await pythonWorker({ address: env.temporal.settings.address!, taskQueue: `${taskQueue}-py`, sources: [STUBBORN] });
  await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(pythonCallWorkflow, {
      taskQueue,
      workflowId: `py-stubborn-${taskQueue}`,
      args: [rewardCall(`${taskQueue}-py`, 'stubborn_reward')],
    });
    await untilStarted(handle);
    const sent = Date.now();
    await worker.stop();
    const exit = await worker.exit;
    process.stderr.write(`[python stop] watchdog: exit ${exit.code} ${exit.at - sent} ms after SIGTERM\n`);
    expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 1, signal: null });
    expect(exit.at - sent).toBeGreaterThanOrEqual(GRACE_MS + 4_000);
    expect(exit.at - sent).toBeLessThan(GRACE_MS + EXIT_MS + 2_000);
    expect(worker.output()).toMatch(/did not stop within 14 s of the signal/);
    expect(worker.output()).not.toMatch(/Fatal Python error|Segmentation fault/);
    await handle.terminate('test over');
  });
});

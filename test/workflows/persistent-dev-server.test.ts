import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { loadWorkerSettings } from '../../config/io/worker-env';
import { connectClient, connectWorker, startTemporal } from '../../workers/temporal-server';
import { createRoundhouseWorker } from '../../workers/worker';
import { bundleWorkflows, uniqueTaskQueue } from '../helpers/temporal';
import { freePort } from '../helpers/ports';
import { preflightWorkflow } from '../../workflows';

test('a workflow started before the whole stack stops completes after it restarts on the same state folder', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-state-'));
  const settings = { ...loadWorkerSettings({ ROUNDHOUSE_STATE_DIR: stateDir }), address: undefined };
  const port = await freePort();
  const uiPort = await freePort();
  const taskQueue = uniqueTaskQueue('persist');
  const workflowId = `persist-${taskQueue}`;

  // First life: start the workflow with no worker polling, then stop the server.
  const first = await startTemporal(settings, { persistent: true, port, uiPort });
  expect(first.dbFile).toBe(path.join(stateDir, 'temporal.db'));
  const c1 = await connectClient(settings, first.address);
  await new Client({ connection: c1 }).workflow.start(preflightWorkflow, { taskQueue, workflowId, args: ['survived'] });
  await c1.close();
  await first.stop();
  expect(fs.statSync(path.join(stateDir, 'temporal.db')).size).toBeGreaterThan(0);

  // Second life: same folder and port; a fresh worker finishes the workflow the first server accepted.
  const second = await startTemporal(settings, { persistent: true, port, uiPort });
  try {
    const c2 = await connectClient(settings, second.address);
    const nc = await connectWorker(settings, second.address);
    const worker = await createRoundhouseWorker({
      connection: nc,
      namespace: 'default',
      taskQueue,
      workflowBundle: await bundleWorkflows(),
    });
    const result = await worker.runUntil(new Client({ connection: c2 }).workflow.getHandle(workflowId).result());
    expect(result).toMatchObject({ workflowId, greeting: 'survived' });
    await c2.close();
    await nc.close();
  } finally {
    await second.stop();
  }
});

test('a persistent server refuses a port that is taken, naming what to do', async () => {
  const settings = {
    ...loadWorkerSettings({ ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-state-')) }),
    address: undefined,
  };
  const busy = Number(process.env.TEMPORAL_ADDRESS!.split(':')[1]); // the shared test server holds it
  await expect(startTemporal(settings, { persistent: true, port: busy })).rejects.toThrow(
    new RegExp(`port ${busy} \\(Temporal\\) is already in use`),
  );
});

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round-contract';
import { startTestEmulator } from '../helpers/emulator';
import { ticketRoundInput } from '../helpers/round';
import { connectTestTemporal, uniqueTaskQueue } from '../helpers/temporal';
import { bundleToFile, startWorkerProcess } from '../helpers/worker-process';

test('an API key from the worker environment reaches the provider but never a workflow history or a log line', async () => {
  const secret = `tgp_secret_${Math.random().toString(36).slice(2)}${Date.now()}`;
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator();
  const taskQueue = uniqueTaskQueue('secrets');
  const worker = startWorkerProcess({
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_WORKFLOW_BUNDLE: await bundleToFile(),
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-secrets-')),
    ROUNDHOUSE_LOG_LEVEL: 'debug',
    TOGETHER_API_KEY: secret,
  });
  try {
    await worker.ready;
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `secrets-${taskQueue}`, trainRows: 16, evalRows: 4 });
    input.spec.provider.kind = 'together'; // a real provider kind: the worker must use TOGETHER_API_KEY
    const workflowId = `round-${taskQueue}`;
    const result: RoundResult = await temporal.client.workflow.execute('roundWorkflow', { taskQueue, workflowId, args: [input] });
    expect(result.status).toBe('completed');

    // The key was used: the emulator derived the resource's owner from it.
    const { createHash } = await import('node:crypto');
    const owner = `user-${createHash('sha256').update(secret).digest('hex').slice(0, 10)}`;
    const l = await (await fetch(`${emulator.url}/_emulator/ledger`)).json();
    expect((l as { resources: { owner: string }[] }).resources.map((r) => r.owner)).toContain(owner);

    const history = JSON.stringify(await temporal.client.workflow.getHandle(workflowId).fetchHistory());
    expect(history.length).toBeGreaterThan(1000);
    expect(history).not.toContain(secret);
    const report = fs.readFileSync(result.reportPath, 'utf8');
    expect(report).not.toContain(secret);
    expect(worker.output().length).toBeGreaterThan(1000); // debug logs were written…
    expect(worker.output()).not.toContain(secret); // …without the key
  } finally {
    await worker.stop();
    await emulator.close();
    await temporal.close();
  }
});

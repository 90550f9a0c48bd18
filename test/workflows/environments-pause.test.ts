import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { roundWorkflow } from '../../workflows';
import { pauseRoundSignal, resumeRoundSignal, roundProgressQuery, type RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { episodeSteps, NUMBER_GAME, numberGameInput, turnsRecorded } from '../helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// A paused environment round resumes after any pause length. A pause gives the step in flight 30 s to land; episodes
// slower than that are abandoned with their call (a workflow of its own, python:<step key>), which nobody waits for
// while the round is paused: its Python attempt finds the gateway closed and the call runs out of time. With the
// defaults that takes about 25 minutes (5 attempts of a 300 s gateway wait); here one attempt of 45 s.
const { env, withWorker } = roundTestEnvironment({}, { ...process.env, TOGETHER_API_KEY: 'tg-pause-key' });

const workers: PythonWorker[] = [];
afterEach(async () => {
  // The abandoned attempt may still sleep in the environment; a worker that does not stop in 20 s is killed (#43 item 9).
  for (const w of workers.splice(0)) {
    const stopped = await Promise.race([w.stop().then(() => true), new Promise((r) => setTimeout(() => r(false), 20_000))]);
    if (!stopped) await w.kill();
  }
});

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 180_000, everyMs = 100): Promise<T> {
  for (const end = Date.now() + timeoutMs; Date.now() < end; await new Promise((r) => setTimeout(r, everyMs))) {
    const value = await check();
    if (value !== undefined) return value;
  }
  throw new Error(`timed out waiting for ${what}`);
}

test('a round paused during its episodes for longer than their call lives resumes with a fresh call and completes', async () => {
  const taskQueue = uniqueTaskQueue('env-pause');
  const input = numberGameInput({ baseUrl: env.emulator.url, kind: 'together', campaignId: `env-${taskQueue}`, limit: 3 });
  const environment = input.spec.round!.grpo!.environment!;
  Object.assign(environment, { timeoutSeconds: 45, retry: { ...environment.retry, maxAttempts: 1 } });
  // Each environment turn waits as long as this file says: 60 s until the pause has abandoned the episodes, then 0.
  const delayFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-env-pause-')), 'delay');
  fs.writeFileSync(delayFile, '60');
  workers.push(
    await startPythonWorker({
      address: env.temporal.settings.address!,
      taskQueue: `${input.campaignId}-py`,
      sources: [NUMBER_GAME],
      env: { ROUNDHOUSE_TEST_ENV_DELAY_FILE: delayFile },
    }),
  );
  const client = env.temporal.client;
  const calls = async () => {
    const runs: { id: string; status: string }[] = [];
    for await (const w of client.workflow.list({ query: `WorkflowType = 'pythonCallWorkflow'` }))
      if (w.workflowId.startsWith(`python:${input.campaignId}/`)) runs.push({ id: w.workflowId, status: w.status.name });
    return runs;
  };
  const { result, ended } = await withWorker(taskQueue, async () => {
    const handle = await client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] });
    // The first step's episodes under way: their first turns recorded, the environment holding them.
    await until('the first turns', async () => (turnsRecorded(input, 0) > 0 ? true : undefined));
    await handle.signal(pauseRoundSignal);
    await until('the pause', async () => ((await handle.query(roundProgressQuery)).phase === 'paused' ? true : undefined));
    expect((await ledger(env.emulator)).active).toEqual([]);
    // The abandoned call runs out of time (its one 45 s attempt) while the round stays paused.
    const ended = await until('the abandoned call to end', async () => {
      const over = (await calls()).filter((c) => c.status !== 'RUNNING' && c.status !== 'COMPLETED');
      return over.length > 0 ? over : undefined;
    });
    process.stderr.write(`[env pause] the abandoned call ended while paused: ${ended.map((c) => `${c.id} ${c.status}`).join(', ')}\n`);
    expect((await handle.query(roundProgressQuery)).phase).toBe('paused');
    fs.writeFileSync(delayFile, '0');
    await handle.signal(resumeRoundSignal);
    return { result: (await handle.result()) as RoundResult, ended: ended[0]! };
  });
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });
  expect(episodeSteps(result)).toHaveLength(result.totalSteps!);
  // The call that ended while paused was started afresh under its id, and that run answered the resumed step.
  const runs = (await calls()).filter((r) => r.id === ended.id);
  expect(runs.map((r) => r.status).sort()).toEqual(['COMPLETED', ended.status].sort());
  expect((await ledger(env.emulator)).active).toEqual([]);
});

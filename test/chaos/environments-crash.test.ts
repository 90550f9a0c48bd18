import { roundWorkflow } from '../../workflows';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { episodeSteps, expectTrainedAsRecorded, NUMBER_GAME, numberGameInput, repeatedDraws, turnsRecorded } from '../helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';

// Multi-turn episodes through worker deaths: a SIGKILLed Python worker mid-episode (the retried episodes replay their
// recorded turns from the gateway), and a SIGKILLed TypeScript worker mid-step (the gateway comes back in another
// process, on another port, with new tokens; the running episodes find it through the gateway file). Either way each
// turn is drawn once by the emulator, and what is trained is what was recorded.
const keys = { TOGETHER_API_KEY: 'tg-env-crash-key', TINKER_API_KEY: 'tml-env-crash-key' };
// The emulator keeps what its trainer received in each forward_backward, to compare with the gateway's records.
const { env, withWorker } = roundTestEnvironment({ trainedBatches: 200 }, { ...process.env, ...keys });

const workers: { stop(): Promise<void>; kill(): Promise<void>; output(): string }[] = [];
afterEach(async () => {
  // A Python worker's graceful shutdown has (rarely) outlasted its 10 s grace here; it is bounded, its output shown.
  for (const w of workers.splice(0)) {
    const stopped = await Promise.race([w.stop().then(() => true), new Promise((r) => setTimeout(() => r(false), 20_000))]);
    if (!stopped) {
      process.stderr.write(`[env crash] a worker did not stop in 20 s:\n${w.output().slice(-2500)}\n`);
      await w.kill();
    }
  }
});

/** Slow environment turns (0.15 s each) so that a kill lands while a step's episodes are under way. */
const SLOW = { ROUNDHOUSE_TEST_ENV_DELAY: '0.15' };

async function pythonWorker(input: RoundInput): Promise<PythonWorker> {
  const w = await startPythonWorker({
    address: env.temporal.settings.address!,
    taskQueue: `${input.campaignId}-py`,
    sources: [NUMBER_GAME],
    env: SLOW,
  });
  workers.push(w);
  return w;
}

/** Waits until the gateway has recorded at least `atLeast` of step `step`'s turns (bounded). */
async function untilTurns(input: RoundInput, step: number, atLeast: number): Promise<number> {
  for (const deadline = Date.now() + 90_000; ;) {
    const n = turnsRecorded(input, step);
    if (n >= atLeast) return n;
    if (Date.now() > deadline) throw new Error(`only ${n} turns of step ${step + 1} recorded in 90 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function expectExactlyOnce(input: RoundInput, result: RoundResult, repeatedBefore: number, repeatedAfter: number) {
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });
  const steps = episodeSteps(result);
  for (const s of steps) expect(s.turnsPerEpisode).toBeGreaterThan(2); // 3, or fewer after an empty reply
  const { trained, records } = await expectTrainedAsRecorded(result, env.emulator, input.campaignId);
  expect(trained).toBeGreaterThan(0);
  expect(trained).toBeLessThanOrEqual(records);
  expect(repeatedAfter).toBe(repeatedBefore); // the emulator drew no turn twice
  return steps;
}

test('a Python worker SIGKILLed mid-episode: the retried episodes replay their recorded turns, none is drawn twice', async () => {
  const taskQueue = uniqueTaskQueue('env-py-kill');
  const input = numberGameInput({ baseUrl: env.emulator.url, kind: 'tinker', campaignId: `env-${taskQueue}`, limit: 3 });
  const first = await pythonWorker(input);
  const repeatedBefore = repeatedDraws(await ledger(env.emulator));
  const round = withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
  );
  // Step 2's 16 episodes (48 turns) under way: kill when a third of its turns are recorded.
  const atKill = await untilTurns(input, 1, 16);
  await first.kill();
  expect(turnsRecorded(input, 1)).toBeLessThan(48);
  await pythonWorker(input);
  const result = await round;
  const steps = await expectExactlyOnce(input, result, repeatedBefore, repeatedDraws(await ledger(env.emulator)));
  expect(steps[1]!.turnsReplayed).toBeGreaterThan(0); // the episodes the kill cut short replayed their recorded turns
  expect(steps.filter((_s, i) => i !== 1).every((s) => s.turnsReplayed === 0)).toBe(true);
  expect((await ledger(env.emulator)).active).toEqual([]);
  process.stderr.write(`[env python kill] killed at ${atKill} turns of step 2; ${steps[1]!.turnsReplayed} replayed from the records\n`);
}, 180_000);

test('the TypeScript worker SIGKILLed mid-step: the gateway comes back in the next worker and the running episodes find it', async () => {
  const taskQueue = uniqueTaskQueue('env-ts-kill');
  const input = numberGameInput({
    baseUrl: env.emulator.url,
    kind: 'together',
    campaignId: `env-${taskQueue}`,
    limit: 3,
    advanced: 'advanced: { heartbeatTimeoutSeconds: 2 }',
  });
  const python = await pythonWorker(input);
  const workerEnv = { ...crashTestWorkerEnv(taskQueue, await bundleToFile()), ...keys };
  let worker: WorkerProcess = startWorkerProcess(workerEnv);
  workers.push({ stop: () => worker.stop(), kill: () => worker.kill(), output: () => worker.output() });
  await worker.ready;
  const repeatedBefore = repeatedDraws(await ledger(env.emulator));
  const handle = await env.temporal.client.workflow.start(roundWorkflow, {
    taskQueue,
    workflowId: `round-${input.campaignId}`,
    args: [input],
  });
  const atKill = await untilTurns(input, 1, 16);
  await worker.kill();
  expect(turnsRecorded(input, 1)).toBeLessThan(48);
  worker = startWorkerProcess(workerEnv);
  await worker.ready;
  const result = await handle.result();
  const steps = await expectExactlyOnce(input, result, repeatedBefore, repeatedDraws(await ledger(env.emulator)));
  // The Python worker lived through it: its episodes carried on against the new gateway, none started over.
  expect(python.process.exitCode).toBeNull();
  // At most the requests in flight at the kill (8 episodes at a time) are answered from a record the killed worker wrote.
  expect(steps[1]!.turnsReplayed).toBeLessThanOrEqual(8);
  expect(steps.filter((_s, i) => i !== 1).every((s) => s.turnsReplayed === 0)).toBe(true);
  expect((await ledger(env.emulator)).active).toEqual([]);
  process.stderr.write(`[env ts kill] killed at ${atKill} turns of step 2; ${steps[1]!.turnsSampled} sampled by the next worker\n`);
}, 180_000);

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { joinLocation, readJson, storeFor } from '../../config/io/artifacts';
import { writeArithmeticData } from '../../examples/arithmetic/generate';
import { writeTicketPreferences } from '../../examples/support-tickets/generate';
import type { CampaignResult } from '../../workflows/campaign/contract';
import { distCli } from '../helpers/dist';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { startS3Server, type RunningS3 } from '../helpers/s3-server';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { privateHostsAvailable, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';
import { trainingWorkerPid, waitFor } from './helpers';

// Workers on separate hosts: each worker process runs in a mount namespace of its own with a private, empty /tmp
// holding its state directory and working directory (where the machine allows it, as root does: see
// privateHostsAvailable; elsewhere separate directories), so no file one writes can be read by another; they share
// nothing but Temporal and the artifact store (S3, a real server process). The spec's data files are
// deleted right after `roundhouse run`. Killing the worker that runs a DPO round after its reference pass, and the one
// running a GRPO round mid-step, must leave the other worker able to finish both with exact steps; `roundhouse
// report` from a third directory renders both campaigns from the store.

let temporal: TestTemporal;
let s3: RunningS3;
let store: string;
const emulators: RunningEmulator[] = [];
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  temporal = await connectTestTemporal();
  s3 = await startS3Server();
  Object.assign(process.env, s3.env); // this process reads the reports back from the store
  store = joinLocation(await s3.bucket(`no-shared-disk-${Date.now()}`), 'team');
}, 300_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  for (const e of emulators) await e.close();
  await s3?.close();
  await temporal?.close();
});

const tmp = (label: string) => fs.mkdtempSync(path.join(os.tmpdir(), `rh-host-${label}-`));

/** A "host": a compiled worker with its own /tmp (state and working directories), and nothing else in common. */
function startHost(name: string, taskQueue: string): { worker: WorkerProcess; dirs: () => string[] } {
  const privateHost = privateHostsAvailable();
  const dirs = privateHost ? [] : [tmp(`${name}-state`), tmp(`${name}-cwd`)];
  const worker = startWorkerProcess(
    {
      ...s3.env,
      TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
      ROUNDHOUSE_TASK_QUEUE: taskQueue,
      ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: '500',
      ROUNDHOUSE_ARTIFACTS: store,
      ...(privateHost ? {} : { ROUNDHOUSE_STATE_DIR: dirs[0]! }),
    },
    privateHost ? { privateHost } : { cwd: dirs[1]! },
  );
  workers.push(worker);
  // A private /tmp is readable from here only while its process lives (through /proc).
  const alive = () => worker.child.exitCode === null && worker.child.signalCode === null;
  return { worker, dirs: () => (privateHost ? (alive() ? [`/proc/${worker.child.pid}/root/tmp/host`] : []) : dirs) };
}

/** `roundhouse` (the compiled CLI) run in `cwd` by someone who shares only Temporal and the store with the workers. */
function cli(args: string[], cwd: string, taskQueue: string): { code: number | null; stdout: string; stderr: string } {
  const env = {
    ...process.env,
    ...s3.env,
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_STATE_DIR: path.join(cwd, '.roundhouse'),
    ROUNDHOUSE_ARTIFACTS: store,
    ROUNDHOUSE_LOG_LEVEL: 'warn',
  };
  const run = spawnSync(process.execPath, [distCli, ...args], { env, cwd, encoding: 'utf8', timeout: 120_000 });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** Writes a one-round campaign spec and its data in a fresh directory, runs it with `roundhouse run`, deletes it all. */
async function runCampaign(kind: 'dpo' | 'grpo', taskQueue: string): Promise<{ campaignId: string; emulator: RunningEmulator }> {
  const emulator = await startTestEmulator({ provisioningDelayMs: 200, operationLatencyMs: 60 });
  emulators.push(emulator);
  const dir = tmp(`${kind}-spec`);
  let data: string;
  let training: string;
  if (kind === 'dpo') {
    writeTicketPreferences(dir, 64, 20);
    data = '{ train: pairs.train.jsonl, eval: pairs.eval.jsonl }';
    training = `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`;
  } else {
    writeArithmeticData(dir);
    data = '{ train: train.jsonl, eval: eval.jsonl }';
    training = `training: { epochs: 2, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, maxStepsOffPolicy: 1 } }`;
  }
  fs.writeFileSync(
    path.join(dir, 'campaign.yaml'),
    `name: ${kind}-no-shared-disk
provider: { kind: local, baseUrl: "${emulator.url}", model: roundhouse/tiny-chat }
data: ${data}
evaluation: { scorer: numeric }
advanced: { heartbeatTimeoutSeconds: 2 }
rounds: { max: 1 }
${training}
`,
  );
  const campaignId = `${kind}-${taskQueue}`;
  const started = cli(['run', 'campaign.yaml', '--id', campaignId], dir, taskQueue);
  expect(started).toMatchObject({ code: 0, stderr: '' });
  fs.rmSync(dir, { recursive: true, force: true }); // the data is gone from the machine that ran `run`
  return { campaignId, emulator };
}

/** SIGKILLs the worker running the round's training segment once the trainer has applied `afterSteps` steps. */
async function killTheTrainingWorker(campaignId: string, emulator: RunningEmulator, afterSteps: number, jitterMs: number) {
  const round = temporal.client.workflow.getHandle(`${campaignId}-round-1`);
  await waitFor(
    `${campaignId}: the trainer past step ${afterSteps}`,
    async () => (await ledger(emulator)).totals.optimizerSteps >= afterSteps,
    120_000,
  );
  if (jitterMs) await new Promise((r) => setTimeout(r, jitterMs)); // inside the next step
  const pid = await waitFor(`${campaignId}: its segment on a worker`, () => trainingWorkerPid(round), 60_000);
  const victim = workers.find((w) => w.child.pid === pid);
  expect(victim).toBeDefined();
  await victim!.kill();
  return { victim: victim!, stepAtKill: (await ledger(emulator)).totals.optimizerSteps };
}

/** Every file under `dir` (relative paths). */
function filesUnder(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((f) => fs.statSync(path.join(dir, f)).isFile());
}

test('two workers sharing no directory: SIGKILL after a DPO reference pass and mid-step in GRPO, the other finishes both with exact steps; report renders from a third directory', async () => {
  const taskQueue = uniqueTaskQueue('no-shared-disk');
  const a = startHost('a', taskQueue);
  const b = startHost('b', taskQueue);
  await Promise.all([a.worker.ready, b.worker.ready]);
  process.stderr.write(
    `[no-shared-disk] hosts: ${privateHostsAvailable() ? 'a private /tmp each (mount namespaces)' : 'separate directories'}\n`,
  );

  // DPO: the reference pass (baseline phase) writes the reference logprobs to the store; kill in training after it.
  const dpo = await runCampaign('dpo', taskQueue);
  const dpoKill = await killTheTrainingWorker(dpo.campaignId, dpo.emulator, 2, 0);
  // A third host takes the place of the one killed; GRPO starts while the survivor still finishes the DPO round.
  const c = startHost('c', taskQueue);
  await c.worker.ready;
  const grpo = await runCampaign('grpo', taskQueue);
  const grpoKill = await killTheTrainingWorker(grpo.campaignId, grpo.emulator, 5, 150);
  process.stderr.write(`[no-shared-disk] DPO killed at trainer step ${dpoKill.stepAtKill}, GRPO at step ${grpoKill.stepAtKill}\n`);

  const planned = { dpo: 16, grpo: 20 };
  for (const [kind, run] of [
    ['dpo', dpo],
    ['grpo', grpo],
  ] as const) {
    const result: CampaignResult = await temporal.client.workflow.getHandle(run.campaignId).result();
    expect(result.rounds.map((r) => [r.status, r.totalSteps])).toEqual([['completed', planned[kind]]]);
    const l = await ledger(run.emulator);
    expect(l.totals.optimizerSteps).toBe(planned[kind]); // none lost, none doubled
    expect(l.resources).toHaveLength(1);
    expect(l.active).toEqual([]);
    const round = await readJson<{ steps: { step: number }[] }>(joinLocation(store, 'campaigns', run.campaignId, 'round-1.json'));
    expect(round!.steps.map((s) => s.step)).toEqual(Array.from({ length: planned[kind] }, (_v, i) => i + 1));
  }
  // The survivors took over from what the killed workers left in the store, not on a disk: none holds round files.
  for (const host of [a, b, c])
    for (const dir of host.dirs()) expect(filesUnder(dir).filter((f) => /round-|\.samples|reference|steps-/.test(f))).toEqual([]);

  const elsewhere = tmp('laptop');
  for (const run of [dpo, grpo]) {
    const report = cli(['report', run.campaignId], elsewhere, taskQueue);
    expect(report).toMatchObject({ code: 0 });
    const html = report.stdout.split('\n')[0]!;
    expect(html).toBe(joinLocation(store, 'campaigns', run.campaignId, 'report.html'));
    expect((await storeFor(html).read(html))!.toString('utf8')).toContain(run.campaignId);
  }
  expect(filesUnder(elsewhere).filter((f) => !f.startsWith('.roundhouse'))).toEqual([]);
}, 300_000);

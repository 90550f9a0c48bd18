import fs from 'node:fs';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { seededRandom } from '../config/rules/random';
import type { RoundKind } from '../config/rules/round-kinds';
import { roundFiles } from '../config/rules/round-files';
import { parseRoundReport } from '../config/io/round-report';
import { startEmulator, type RunningEmulator } from '../emulator/server';
import type { Ledger } from '../emulator/engine';
import { arithmeticRoundInput } from '../test/helpers/round';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess, type WorkerProcess } from '../test/helpers/worker-process';
import { attemptWasInterrupted, runningActivities, TRAINING_ACTIVITY } from '../test/helpers/running-activities';
import { roundWorkflow } from '../workflows';
import type { RoundInput, RoundResult } from '../workflows/round/contract';

/**
 * The soak: N randomized rounds (every kind, both dialects where the kind exists) against the emulator, each under
 * transport faults (429/5xx/resets/lost responses), provider faults (failed forward-backwards with mixed codes, a
 * trainer that dies, a session that expires, a Baseten run preempted, a create queued or given up for capacity) and SIGKILLs of real worker processes. Each
 * round is checked against the emulator's ledger: its planned steps applied in the weights it kept, none of them
 * an optimizer step without a gradient, every step recorded once, and nothing left holding a GPU.
 */
export interface SoakFigures {
  rounds: number;
  completed: number;
  stepsExact: number;
  recordedOnce: number;
  emptyStepsInKeptWeights: number;
  resourcesLeftActive: number;
  recoveries: number;
  /** Provisionings that waited for capacity, and the creates the provider gave up on among them. */
  capacityWaits: number;
  capacityRetries: number;
  /** SIGKILLs of a worker process, and those proven to have interrupted the round's training segment on it. */
  workerKills: number;
  killsInTraining: number;
  /** Rounds drawn for a kill that got none inside training: their training ended first, or the attempt killed had finished. */
  killsMissed: string[];
  faultsInjected: number;
  failures: string[];
}

/** Custom rounds call a loss function on a Python worker, which the soak runs none of (test/workflows/custom-loss*.test.ts run them). */
type Variant = { kind: Exclude<RoundKind, 'custom'>; dialect: 'local' | 'baseten' | 'tinker' };
const VARIANTS: Variant[] = [
  { kind: 'sft', dialect: 'local' },
  { kind: 'sft', dialect: 'baseten' },
  { kind: 'grpo', dialect: 'local' },
  { kind: 'grpo', dialect: 'baseten' },
  { kind: 'dpo', dialect: 'local' },
  { kind: 'sft', dialect: 'tinker' },
  { kind: 'grpo', dialect: 'tinker' },
  { kind: 'dpo', dialect: 'tinker' },
];

const KIND_YAML: Record<Variant['kind'], string> = {
  sft: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 3, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }`,
  grpo: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 3, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: ppo } } }`,
  dpo: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 3, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
};

/** One round's faults, drawn from the soak's seed: transport faults always, provider faults at random. */
function faultsFor(random: () => number, variant: Variant, seed: number) {
  const pick = (p: number) => random() < p;
  const rules: Record<string, unknown>[] = [
    { kind: 'http-429', rate: 0.03, max: 1000, retryAfterMs: 5 },
    { kind: 'http-503', rate: 0.03, max: 1000, retryAfterMs: 5 },
    { kind: 'reset', rate: 0.02, max: 1000 },
    { kind: 'lose-response', rate: 0.02, max: 1000 },
    {
      kind: 'fail-operation',
      operation: 'forward-backward',
      errorCode: ['INTERNAL_ERROR', 'TIMEOUT', 'RESOURCE_EXHAUSTED'][seed % 3],
      rate: 0.1,
      max: 2,
    },
  ];
  if (pick(0.3)) rules.push({ kind: 'resource-error', operation: 'optim-step', after: 2 + Math.floor(random() * 4), max: 1 });
  if (pick(0.3)) rules.push({ kind: 'session-expire', operation: 'optim-step', after: 2 + Math.floor(random() * 4), max: 1 });
  if (variant.dialect === 'baseten' && pick(0.3))
    rules.push({ kind: 'preempt', operation: 'optim-step', after: 2 + Math.floor(random() * 4), max: 1 });
  // A capacity shortage at a create: the provider gives up on it (made again), or it waits in the queue.
  if (pick(0.1)) rules.push({ kind: 'capacity-timeout', durationMs: 500 + Math.floor(random() * 1000), max: 1 });
  if (pick(0.2))
    rules.push({
      kind: 'capacity-queue',
      durationMs: 500 + Math.floor(random() * 2000),
      queuePosition: 1 + Math.floor(random() * 4),
      max: 1,
    });
  return { seed, rules };
}

async function post(emulator: RunningEmulator, path: string, body: unknown): Promise<void> {
  const res = await fetch(`${emulator.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
}

async function ledgerOf(emulator: RunningEmulator): Promise<Ledger> {
  return (await (await fetch(`${emulator.url}/_emulator/ledger`)).json()) as Ledger;
}

/**
 * SIGKILLs the worker that runs the round's training segment once its heartbeat is at `fromStep` (and `jitterMs`
 * more), and starts a fresh one in its place. `inTraining`: the killed attempt never finished, a later one ran
 * (proven by the server). A round whose training ends first gets no kill.
 */
async function killBusyWorker(
  handle: WorkflowHandle,
  workers: WorkerProcess[],
  start: () => WorkerProcess,
  at: { fromStep: number; jitterMs: number },
  over: () => boolean,
): Promise<{ killed: boolean; inTraining: boolean; detail: string }> {
  const busy = async () => {
    for (const a of await runningActivities(handle).catch(() => [])) {
      const victim = workers.findIndex((w) => w.child.pid === a.workerPid);
      if (TRAINING_ACTIVITY.test(a.type) && victim >= 0) return { ...a, victim };
    }
    return undefined;
  };
  while (!over()) {
    const hit = await busy();
    if (!hit || (hit.heartbeatStep ?? 0) < at.fromStep) {
      await new Promise((r) => setTimeout(r, 20));
      continue;
    }
    await new Promise((r) => setTimeout(r, at.jitterMs));
    const still = await busy();
    if (still?.activityId !== hit.activityId || still.attempt !== hit.attempt || still.victim !== hit.victim) continue;
    await workers[hit.victim]!.kill();
    workers[hit.victim] = start();
    await workers[hit.victim]!.ready;
    const inTraining = await attemptWasInterrupted(handle, hit.activityId, hit.attempt);
    const where = `${hit.type} attempt ${hit.attempt} at heartbeat step ${hit.heartbeatStep ?? 0}`;
    return {
      killed: true,
      inTraining,
      detail: `killed the worker running ${where}${inTraining ? '' : ', but that attempt was not interrupted (it finished)'}`,
    };
  }
  return { killed: false, inTraining: false, detail: `training ended before its heartbeat reached step ${at.fromStep}` };
}

export async function runSoak(options: {
  client: Client;
  temporalAddress: string;
  rounds: number;
  seed?: number;
  /** Round i runs variant i mod 8 (every kind on every dialect that has it, in any 8 rounds) instead of a random one. */
  cycleVariants?: boolean;
  log?: (line: string) => void;
}): Promise<SoakFigures> {
  const log = options.log ?? (() => undefined);
  const random = seededRandom(options.seed ?? 1);
  const figures: SoakFigures = {
    rounds: options.rounds,
    completed: 0,
    stepsExact: 0,
    recordedOnce: 0,
    emptyStepsInKeptWeights: 0,
    resourcesLeftActive: 0,
    recoveries: 0,
    capacityWaits: 0,
    capacityRetries: 0,
    workerKills: 0,
    killsInTraining: 0,
    killsMissed: [],
    faultsInjected: 0,
    failures: [],
  };
  const emulator = await startEmulator({ port: 0, host: '127.0.0.1', provisioningDelayMs: 50 });
  const bundleFile = await bundleToFile();
  const taskQueue = `soak-${Date.now().toString(36)}`;
  const env = {
    ...crashTestWorkerEnv(taskQueue, bundleFile),
    TEMPORAL_ADDRESS: options.temporalAddress,
    BASETEN_API_KEY: 'soak-baseten-key',
    TINKER_API_KEY: 'tml-soak-key',
  };
  const workers: WorkerProcess[] = [startWorkerProcess(env), startWorkerProcess(env)];
  const dir = fs.mkdtempSync('/tmp/rh-soak-');
  try {
    await Promise.all(workers.map((w) => w.ready));
    for (let i = 0; i < options.rounds; i++) {
      const drawn = VARIANTS[Math.floor(random() * VARIANTS.length)]!;
      const variant = options.cycleVariants ? VARIANTS[i % VARIANTS.length]! : drawn;
      const campaignId = `soak-${i}-${taskQueue}`;
      const input: RoundInput = arithmeticRoundInput({
        baseUrl: emulator.url,
        campaignId,
        dir,
        limit: 8,
        tickets: variant.kind === 'dpo',
        pairs: false,
        yaml: `${KIND_YAML[variant.kind]}\nadvanced: { heartbeatTimeoutSeconds: 2, maxRecoveries: 10 }`,
      });
      input.spec.provider = { ...input.spec.provider, kind: variant.dialect, baseUrl: emulator.url };
      await post(emulator, '/_emulator/faults', faultsFor(random, variant, i + 1));
      const handle = await options.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${campaignId}`, args: [input] });
      // About half the rounds SIGKILL the worker running their training segment, at a random step of it; the other
      // worker takes the segment over.
      const killAt = random() < 0.5 ? { fromStep: Math.floor(random() * 4), jitterMs: Math.floor(random() * 300) } : undefined;
      let roundOver = false;
      const killing =
        killAt &&
        killBusyWorker(
          handle,
          workers,
          () => startWorkerProcess(env),
          killAt,
          () => roundOver,
        );
      let result: RoundResult | undefined;
      try {
        result = await handle.result();
      } catch (err) {
        figures.failures.push(`round ${i} (${variant.kind}/${variant.dialect}): ${(err as Error).message.slice(0, 300)}`);
      } finally {
        roundOver = true;
      }
      const kill = await killing;
      if (kill) {
        figures.workerKills += kill.killed ? 1 : 0;
        figures.killsInTraining += kill.inTraining ? 1 : 0;
        if (!kill.inTraining) figures.killsMissed.push(`round ${i + 1} (${variant.kind}/${variant.dialect}): ${kill.detail}`);
        log(`round ${i + 1} kill: ${kill.detail}`);
      }
      const l = await ledgerOf(emulator);
      figures.resourcesLeftActive = l.active.length;
      const reportFile = roundFiles(input.reportDir, input.round).report;
      const report = fs.existsSync(reportFile) ? parseRoundReport(reportFile, JSON.parse(fs.readFileSync(reportFile, 'utf8'))) : undefined;
      const kept = report && l.sessions.find((s) => s.id === report.session_id);
      if (result?.status === 'completed') figures.completed += 1;
      // The kept session's own step counter is the round's planned steps (the round starts from the base model).
      if (result && kept && result.stepsApplied === result.totalSteps && kept.step === result.totalSteps) figures.stepsExact += 1;
      if (
        report &&
        report.steps.map((s) => s.step).join(',') === Array.from({ length: report.steps_planned }, (_v, k) => k + 1).join(',')
      ) {
        figures.recordedOnce += 1;
      }
      figures.emptyStepsInKeptWeights += kept?.lineageEmptyOptimizerSteps ?? 0;
      figures.recoveries += report?.recoveries.length ?? 0;
      const waits: { creates: number }[] = report?.capacity_waits ?? [];
      figures.capacityWaits += waits.length;
      figures.capacityRetries += waits.reduce((a, w) => a + w.creates - 1, 0);
      log(
        `round ${i + 1}/${options.rounds} ${variant.kind}/${variant.dialect}: ${result?.status ?? 'failed'}, ${report?.recoveries?.length ?? 0} recoveries, ${report?.capacity_waits?.length ?? 0} capacity waits, kept session step ${kept?.step ?? '?'}/${result?.totalSteps ?? '?'}, empty in kept weights ${kept?.lineageEmptyOptimizerSteps ?? '?'}, active ${l.active.length}`,
      );
      const fired = ((await (await fetch(`${emulator.url}/_emulator/faults`)).json()) as { fired: { fired: number }[] }).fired;
      figures.faultsInjected += fired.reduce((a, f) => a + f.fired, 0);
      await post(emulator, '/_emulator/faults', {});
    }
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await emulator.close();
  }
  return figures;
}

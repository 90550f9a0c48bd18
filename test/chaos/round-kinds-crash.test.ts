import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { seededRandom } from '../../config/rules/random';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { RoundInput, RoundProgress, RoundResult } from '../../workflows/round/contract';
import { firedFaults, ledger, setFaults, startTestEmulator, tenPercentFaults, type RunningEmulator } from '../helpers/emulator';
import { arithmeticRoundInput, progressOf } from '../helpers/round';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import {
  bundleToFile,
  crashTestWorkerEnv,
  killAtPoints,
  startWorkerProcess,
  type KillPoint,
  type WorkerProcess,
} from '../helpers/worker-process';
import { TRAINING_ACTIVITY } from '../helpers/running-activities';
import { roundWorkflow } from '../../workflows';

/**
 * The SFT round's crash and fault tests, run on the GRPO and DPO kinds: SIGKILL of real worker processes inside
 * the reference pass and inside training, and 10 % injected faults; the trainer must apply exactly the planned
 * steps, once, and nothing may be left holding a GPU.
 */

let temporal: TestTemporal;
let bundleFile: string;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
});

afterAll(async () => {
  await temporal?.close();
});

const KINDS = {
  grpo: (baseUrl: string, campaignId: string) =>
    arithmeticRoundInput({
      baseUrl,
      campaignId,
      yaml: `training: { epochs: 2, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
advanced: { heartbeatTimeoutSeconds: 2 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, maxStepsOffPolicy: 1 } }`,
    }),
  dpo: (baseUrl: string, campaignId: string) =>
    arithmeticRoundInput({
      baseUrl,
      campaignId,
      tickets: true,
      yaml: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
advanced: { heartbeatTimeoutSeconds: 2 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
    }),
} satisfies Record<string, (baseUrl: string, campaignId: string) => RoundInput>;

const PLANNED = { grpo: 20, dpo: 16 }; // two epochs

describe.each(['grpo', 'dpo'] as const)('%s round', (kind) => {
  test('SIGKILL of the worker in the baseline/reference pass and inside training: exactly the planned steps, nothing left active', async () => {
    const emulator: RunningEmulator = await startTestEmulator({ provisioningDelayMs: 300, operationLatencyMs: 40 });
    // The baseline (GRPO) or reference pass (DPO) is slow enough to be caught and killed in: its first forward waits.
    await setFaults(emulator, { rules: [{ kind: 'delay', method: 'POST', path: '/operations/forward-backward$', delayMs: 1500, max: 1 }] });
    const taskQueue = uniqueTaskQueue(`crash-${kind}`);
    const input = KINDS[kind](emulator.url, `crash-${kind}-${taskQueue}`);
    const env = crashTestWorkerEnv(taskQueue, bundleFile);
    const random = seededRandom(kind === 'grpo' ? 8 : 88);
    const planned = PLANNED[kind];
    // Each kill must land inside a running attempt of the phase's activity on the killed worker (a training kill: with
    // the segment's heartbeat at the step), proven afterwards by the attempt that followed it; none may be skipped.
    const killPoints: KillPoint<RoundProgress>[] = [
      { name: 'baseline', when: (p) => p.phase === 'baseline', inside: { activity: /^(measureLoss|computeDpoReference)$/ } },
      // A segment's heartbeat reaches the server at most every 1.6 s, so each point is one a segment starts at (or, the
      // first, just after): a kill lands in each of the first four segments.
      ...[1, 4, 8, 12].map((s) => ({
        name: `training ≥ step ${s}`,
        when: (p: RoundProgress) => p.phase === 'training',
        inside: { activity: TRAINING_ACTIVITY, fromStep: s },
      })),
    ];
    let worker: WorkerProcess = startWorkerProcess(env);
    try {
      await worker.ready;
      const handle = await temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${input.campaignId}`,
        args: [input],
      });
      const killed = await killAtPoints({
        points: killPoints,
        progress: () => progressOf(handle),
        workflow: handle,
        worker,
        env,
        describe: (p) => `phase ${p.phase}, step ${p.step}`,
        beyond: (p) => ['checkpointing', 'sampling', 'evaluating', 'cleanup', 'completed', 'failed'].includes(p.phase),
        jitterMs: () => Math.floor(random() * 250), // land inside a step
        perPointMs: 60_000,
        log: (line) => process.stderr.write(`[crash ${kind}] ${line}\n`),
      });
      worker = killed.worker;
      const kills = killed.kills;
      const result: RoundResult = await handle.result();
      process.stderr.write(`[crash ${kind}] ${kills.length} kills: ${kills.join('; ')}\n`);
      expect(killed.missed).toEqual([]);
      expect(killed.outcomes.filter((o) => TRAINING_ACTIVITY.test(o.activity?.type ?? ''))).toHaveLength(4);
      expect(result).toMatchObject({ status: 'completed', kind, stepsApplied: planned, totalSteps: planned });
      // A killed worker's segment is resumed from its heartbeat by the next attempt, not rolled back.
      expect(result.recoveries).toBeUndefined();
      const l = await ledger(emulator);
      expect(l.resources).toHaveLength(1);
      expect(l.totals.optimizerSteps).toBe(planned); // none lost, none doubled: no step redone
      expect(l.active).toEqual([]);
      process.stderr.write(`[crash ${kind}] duplicates absorbed by idempotency keys: ${l.totals.duplicatesAbsorbed}\n`);
      const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
      expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: planned }, (_v, i) => i + 1));
      if (kind === 'grpo') expect(report.steps.every((s: { stepsOffPolicy: number }) => s.stepsOffPolicy <= 1)).toBe(true);
    } finally {
      await worker.stop();
      await emulator.close();
    }
  }, 240_000);

  test('with 429/5xx/resets/lost responses injected at 10% the round completes with the exact step count', async () => {
    const emulator = await startTestEmulator({ provisioningDelayMs: 100 });
    const providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-faults-')) });
    try {
      await setFaults(emulator, tenPercentFaults(kind === 'grpo' ? 12 : 13));
      const taskQueue = uniqueTaskQueue(`faults-${kind}`);
      const input = KINDS[kind](emulator.url, `faults-${kind}-${taskQueue}`);
      // One epoch: a round of several segments meets well over ten faults; a second epoch only meets more of the same.
      input.spec.training.epochs = 1;
      const planned = PLANNED[kind] / 2;
      const worker = await createRoundhouseWorker({
        connection: temporal.nativeConnection,
        namespace: temporal.settings.namespace,
        taskQueue,
        workflowBundle: { codePath: bundleFile },
        providers,
      });
      const result: RoundResult = await worker.runUntil(
        temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
      );
      expect(result).toMatchObject({ status: 'completed', stepsApplied: planned, totalSteps: planned });
      const fired = await firedFaults(emulator);
      process.stderr.write(`[faults ${kind}] injected: ${fired.summary}\n`);
      expect(fired.total).toBeGreaterThan(10);
      await setFaults(emulator, {});
      const l = await ledger(emulator);
      expect(l.totals.optimizerSteps).toBe(planned);
      expect(l.active).toEqual([]);
      expect(l.resources).toHaveLength(1);
    } finally {
      await providers.close();
      await emulator.close();
    }
  }, 240_000);
});

import fs from 'node:fs';
import { seededRandom } from '../../config/rules/random';
import type { RoundProgress, RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { arithmeticRoundInput, progressOf } from '../helpers/round';
import { TRAINING_ACTIVITY } from '../helpers/running-activities';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import {
  bundleToFile,
  crashTestWorkerEnv,
  killAtPoints,
  startWorkerProcess,
  type KillPoint,
  type WorkerProcess,
} from '../helpers/worker-process';
import { roundWorkflow } from '../../workflows';

/**
 * Baseten SFT and GRPO rounds under SIGKILLs of real worker processes: in the baseline and inside three training
 * segments. A Loops trainer dedupes operations on their Idempotency-Key and reports its step, so the next attempt of a
 * killed segment re-polls the operations in flight and goes on from the trainer's own count: no rollback, and no
 * optimizer step applied twice.
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

const KIND_YAML = {
  sft: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 4 } }
sampling: { maxTokens: 3 }`,
  grpo: `training: { epochs: 2, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 4 } }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: ppo }, maxStepsOffPolicy: 1 } }`,
};
const PLANNED = 14; // 51 arithmetic rows in batches of 8 = 7 steps an epoch, 2 epochs

test.each(['sft', 'grpo'] as const)(
  'Baseten %s round: SIGKILL of the worker in the baseline and inside training: exactly the planned steps, none redone, none empty, nothing left active',
  async (kind) => {
    const emulator: RunningEmulator = await startTestEmulator({ provisioningDelayMs: 300, operationLatencyMs: 40 });
    // The baseline is slow enough to be caught and killed in: its first forward waits.
    await setFaults(emulator, { rules: [{ kind: 'delay', method: 'POST', path: '/forward$', delayMs: 1500, max: 1 }] });
    const taskQueue = uniqueTaskQueue(`crash-baseten-${kind}`);
    const input = arithmeticRoundInput({
      baseUrl: emulator.url,
      campaignId: `crash-baseten-${kind}-${taskQueue}`,
      limit: 8,
      yaml: `${KIND_YAML[kind]}\nadvanced: { heartbeatTimeoutSeconds: 2 }`,
    });
    input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: emulator.url };
    const env = { ...crashTestWorkerEnv(taskQueue, bundleFile), BASETEN_API_KEY: `bt-crash-${kind}` };
    const random = seededRandom(kind === 'sft' ? 29 : 290);
    // Each kill must land inside a running attempt of the phase's activity on the killed worker (a training kill: with
    // the segment's heartbeat at the step), proven afterwards by the attempt that followed it; none may be skipped.
    const killPoints: KillPoint<RoundProgress>[] = [
      { name: 'baseline', when: (p) => p.phase === 'baseline', inside: { activity: /^measureLoss$/ } },
      ...[1, 4, 8].map((s) => ({
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
        log: (line) => process.stderr.write(`[crash baseten ${kind}] ${line}\n`),
      });
      worker = killed.worker;
      const result: RoundResult = await handle.result();
      expect(killed.missed).toEqual([]);
      expect(killed.outcomes.filter((o) => TRAINING_ACTIVITY.test(o.activity?.type ?? ''))).toHaveLength(3);
      expect(result).toMatchObject({ status: 'completed', kind, stepsApplied: PLANNED, totalSteps: PLANNED });
      // A killed worker's segment is resumed from its heartbeat and the trainer's step, never rolled back.
      expect(result.recoveries).toBeUndefined();

      const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
      expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: PLANNED }, (_v, i) => i + 1));
      const l = await ledger(emulator);
      // The run behind the final checkpoint holds exactly the planned steps, none without a gradient; and no optimizer
      // step was applied anywhere beyond them (redone steps: 0).
      const kept = l.sessions.find((s) => s.id === report.session_id)!;
      expect(kept.step).toBe(PLANNED);
      expect(kept.lineageEmptyOptimizerSteps).toBe(0);
      expect(l.totals.optimizerSteps).toBe(PLANNED);
      expect(l.totals.emptyOptimizerSteps).toBe(0);
      expect(l.active).toEqual([]);
      process.stderr.write(
        `[crash baseten ${kind}] ${killed.kills.length} kills, ${l.totals.optimizerSteps} optimizer steps for ${PLANNED} planned (redone: ${
          l.totals.optimizerSteps - PLANNED
        }), duplicates absorbed by idempotency keys: ${l.totals.duplicatesAbsorbed}\n`,
      );
      if (kind === 'grpo') expect(report.steps.every((s: { stepsOffPolicy: number }) => s.stepsOffPolicy <= 1)).toBe(true);
    } finally {
      await worker.stop();
      await emulator.close();
    }
  },
  240_000,
);

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Every round kind on both dialects where it exists, under the provider-side failures hosted trainers have: failed
// forward-backwards (mixed codes, 10 %), a trainer death and a session expiry mid-training, and (Baseten) a preemption.
// On Tinker the trainer that dies is a model (the session it belongs to lives on and takes the next one).
const { env, runRound } = roundTestEnvironment(
  { provisioningDelayMs: 50 },
  { ...process.env, BASETEN_API_KEY: 'bt-recovery-key', TINKER_API_KEY: 'tml-recovery-key' },
);

const KIND_YAML = {
  sft: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }`,
  grpo: `training: { epochs: 2, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: ppo } } }`,
  dpo: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
};

const CASES = [
  { kind: 'sft', dialect: 'local' },
  { kind: 'sft', dialect: 'baseten' },
  { kind: 'grpo', dialect: 'local' },
  { kind: 'grpo', dialect: 'baseten' },
  { kind: 'dpo', dialect: 'local' },
  { kind: 'sft', dialect: 'tinker' },
  { kind: 'grpo', dialect: 'tinker' },
  { kind: 'dpo', dialect: 'tinker' },
] as const;

afterEach(async () => {
  await setFaults(env.emulator, {});
});

test.each(CASES)(
  '$kind on the $dialect dialect: failed steps, a trainer death and a session expiry (Baseten: a preemption) end with exact steps in the kept weights, none of them empty',
  async ({ kind, dialect }) => {
    const taskQueue = uniqueTaskQueue(`recover-${kind}-${dialect}`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-recover-'));
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `recover-${kind}-${dialect}-${taskQueue}`,
      dir,
      limit: 8,
      tickets: kind === 'dpo',
      yaml: `${KIND_YAML[kind]}\nadvanced: { maxRecoveries: 12 }`,
    });
    input.spec.provider = { ...input.spec.provider, kind: dialect, baseUrl: env.emulator.url };
    await setFaults(env.emulator, {
      seed: 21,
      rules: [
        { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INTERNAL_ERROR', rate: 0.04, max: 1 },
        { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'TIMEOUT', rate: 0.03, max: 1 },
        { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'RESOURCE_EXHAUSTED', rate: 0.03, max: 1 },
        { kind: 'resource-error', operation: 'optim-step', after: 3, max: 1 },
        // Together's sessions expire; a Baseten run is its own session, and is preempted instead.
        dialect === 'baseten'
          ? { kind: 'preempt', operation: 'optim-step', after: 6, max: 1 }
          : { kind: 'session-expire', operation: 'optim-step', after: 6, max: 1 },
      ],
    });
    const result: RoundResult = await runRound(input, taskQueue);
    const planned = result.totalSteps;
    expect(result).toMatchObject({ status: 'completed', kind, stepsApplied: planned });

    const r = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    process.stderr.write(
      `[recovery ${kind}/${dialect}] ${planned} steps, ${r.recoveries.length} recoveries: ${r.recoveries
        .map(
          (x: { phase: string; error_type: string; code: string; failed_at_step: number; rolled_back_to: number; new_trainer: boolean }) =>
            `${x.error_type}/${x.code} ${x.phase}@${x.failed_at_step}→${x.rolled_back_to}${x.new_trainer ? ' (new trainer)' : ''}`,
        )
        .join(', ')}\n`,
    );
    expect(r.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: planned }, (_v, i) => i + 1));
    expect(r.recoveries.length).toBeGreaterThanOrEqual(2);
    const faults = (await (await fetch(`${env.emulator.url}/_emulator/faults`)).json()) as { fired: { kind: string; fired: number }[] };
    const fired = (k: string) => faults.fired.filter((f) => f.kind === k).reduce((a, f) => a + f.fired, 0);
    expect(fired('resource-error')).toBe(1);
    expect(fired(dialect === 'baseten' ? 'preempt' : 'session-expire')).toBe(1);

    const l = await ledger(env.emulator);
    expect(l.active).toEqual([]);
    // The session that produced the final checkpoint holds exactly the planned steps, and none of its lineage's
    // optimizer steps ran without a gradient.
    const kept = l.sessions.find((s) => s.id === r.session_id)!;
    expect(kept.step).toBe(planned);
    expect(kept.lineageEmptyOptimizerSteps).toBe(0);
    if (dialect === 'tinker') {
      // A Tinker session per trainer (a new one after the expiry), each released; the models of each (one per
      // reopening) unloaded with it; no GPU time billed, tokens instead.
      expect(r.deactivated_ids.length).toBe(1 + r.recoveries.filter((x: { new_trainer: boolean }) => x.new_trainer).length);
      expect(r.deactivated_ids.length).toBe(2);
      const models = l.resources.filter((x) => r.deactivated_ids.some((id: string) => x.id.startsWith(`${id}:train:`)));
      expect(models.length).toBeGreaterThanOrEqual(3);
      expect(models.every((x) => x.gpuSeconds === 0)).toBe(true);
      const trained = l.sessions.filter((x) => models.some((m) => m.id === x.id)).reduce((a, x) => a + x.tokens.train, 0);
      expect(trained).toBeGreaterThan(0);
    } else {
      // One trainer at a time: every trainer this round used was released, the replaced ones before their successors.
      const trainers = new Set(l.sessions.filter((s) => r.deactivated_ids.includes(s.resourceId)).map((s) => s.resourceId));
      expect(trainers.size).toBe(r.deactivated_ids.length);
      expect(r.deactivated_ids.length).toBe(1 + r.recoveries.filter((x: { new_trainer: boolean }) => x.new_trainer).length);
    }
  },
);

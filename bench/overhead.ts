import type { RoundResult } from '../workflows/round/contract';
import fs from 'node:fs';
import path from 'node:path';
import { ProviderRegistry } from '../workers/providers';
import { BENCH_TINKER_KEY, runDirectLoop } from './direct';
import { benchRoundInput, note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';
import { roundWorkflow } from '../workflows';

interface Mode {
  name: string;
  /** The round's dialect (default: the worker's `local`, Together's wire). */
  dialect?: 'tinker';
  emulator: { operationLatencyMs?: number; clockCycleMs?: number };
  /** Targets of this mode: [round / pipelined, round / naive]. */
  vsPipelined?: number;
  vsNaiveBelow?: number;
}

const MODES: Mode[] = [
  { name: 'latency50ms', emulator: { operationLatencyMs: 50 } },
  { name: 'latency200ms', emulator: { operationLatencyMs: 200 }, vsPipelined: 1.03 },
  { name: 'clock200ms', emulator: { clockCycleMs: 200 }, vsNaiveBelow: 0.6 },
  // Tinker's wire: futures long-polled through retrieve_future, protobuf forward-backward, seq_id order per model.
  { name: 'tinker200ms', dialect: 'tinker', emulator: { operationLatencyMs: 200 }, vsPipelined: 1.03 },
];

/**
 * Orchestration overhead: the same training (data, steps, seed, client) timed three ways against one emulator —
 * a naive direct loop, a pipelined direct loop, and a Roundhouse round (its training phase, from the server's
 * history: first segment scheduled → last segment completed).
 */
export async function overheadBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  // 20 steps a loop (30 until 2026-12-07, 40 s more of the full run; BENCHMARKS.md has both runs' ratios).
  const steps = ctx.quick ? 6 : 20;
  for (const mode of ctx.quick ? MODES.slice(0, 1) : MODES) {
    const emulator = await startBenchEmulator(mode.emulator);
    try {
      const input = (id: string) => {
        const i = benchRoundInput({
          baseUrl: emulator.url,
          campaignId: `overhead-${mode.name}-${id}`,
          steps,
          stepsPerEpoch: Math.min(steps, 10),
        });
        if (mode.dialect) i.spec.provider = { ...i.spec.provider, kind: mode.dialect };
        return i;
      };
      const naive = await runDirectLoop('naive', input('naive'), `${mode.name}-naive`);
      const pipelined = await runDirectLoop('pipelined', input('pipelined'), `${mode.name}-pipelined`);
      const taskQueue = `bench-overhead-${mode.name}-${Date.now()}`;
      const roundInput = input('round');
      const workflowId = `round-${taskQueue}`;
      const registry = mode.dialect
        ? new ProviderRegistry({
            stateDir: fs.mkdtempSync(path.join(ctx.scratch, 'worker-')),
            env: { ...process.env, TINKER_API_KEY: BENCH_TINKER_KEY },
          })
        : undefined;
      const result: RoundResult = await withWorker(
        ctx,
        taskQueue,
        () => ctx.client.workflow.execute(roundWorkflow, { taskQueue, workflowId, args: [roundInput] }),
        registry,
      );
      if (result.status !== 'completed' || result.stepsApplied !== steps)
        throw new Error(`round ended ${result.status} with ${result.stepsApplied}/${steps} steps`);
      const phase = trainingPhase(await ctx.client.workflow.getHandle(workflowId).fetchHistory());
      note(
        `overhead ${mode.name}: ${steps} steps — naive ${naive.trainingMs} ms, pipelined ${pipelined.trainingMs} ms, round ${phase.ms} ms (${phase.segments} segment(s))`,
      );
      const perStep = (ms: number) => ms / steps;
      report({ name: `overhead.${mode.name}.naive_ms_per_step`, value: perStep(naive.trainingMs), target: 'info' });
      report({ name: `overhead.${mode.name}.pipelined_ms_per_step`, value: perStep(pipelined.trainingMs), target: 'info' });
      report({ name: `overhead.${mode.name}.round_ms_per_step`, value: perStep(phase.ms), target: 'info' });
      const vsPipelined = phase.ms / pipelined.trainingMs;
      const vsNaive = phase.ms / naive.trainingMs;
      report({
        name: `overhead.${mode.name}.round_over_pipelined`,
        value: vsPipelined,
        target: mode.vsPipelined !== undefined ? `≤ ${mode.vsPipelined}` : 'info',
        met: mode.vsPipelined !== undefined ? vsPipelined <= mode.vsPipelined : undefined,
      });
      report({
        name: `overhead.${mode.name}.round_over_naive`,
        value: vsNaive,
        target: mode.vsNaiveBelow !== undefined ? `< ${mode.vsNaiveBelow}` : 'info',
        met: mode.vsNaiveBelow !== undefined ? vsNaive < mode.vsNaiveBelow : undefined,
      });
      const l = emulator.engine.ledger();
      if (l.totals.optimizerSteps !== 3 * steps)
        throw new Error(`the emulator applied ${l.totals.optimizerSteps} optimizer steps, expected ${3 * steps}`);
    } finally {
      await emulator.close();
    }
  }
}

import fs from 'node:fs';
import type { WorkflowStartOptions } from '@temporalio/client';
import type { RoundResult } from '../workflows/round/contract';
import { startWorkerProcess } from '../test/helpers/worker-process';
import { BENCH_BASETEN_KEY, runDirectLoop } from './direct';
import { benchRoundInput, childPids, cpuMeter, note, startBenchEmulator, trainingPhase, type BenchContext, type Report } from './harness';
import { workerProcessEnv } from './recovery';
import { roundWorkflow } from '../workflows';

const MIB = 2 ** 20;
const RSS_LIMIT_MIB = 2048;

/** Peak resident set of a process (VmHWM), in bytes. */
function peakRss(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /VmHWM:\s+(\d+)\s+kB/.exec(status);
  return kb ? Number(kb[1]) * 1024 : NaN;
}

/** One pass of the scale benchmark: a latency per operation, the concurrency levels, and what each must meet. */
export interface ScalePass {
  /** Figure name prefix after `scale.` ('' for the main pass at 1 s operations). */
  prefix: string;
  operationLatencyMs: number;
  /** The wire the rounds speak: `baseten` (its runs carry the round's tag) or `together` (creates pass the gate). */
  dialect: 'baseten' | 'together';
  levels: number[];
  /** Levels at which the direct-loop control runs too (always with 1, the baseline). */
  control: number[];
  /** Per-step ratio targets by level; levels without one are reported as info. */
  targets: Record<number, number>;
  steps: number;
}

/**
 * The passes of a full run: at 1 s operations (hosted trainers take seconds) 1, 100 and 1,000 rounds against their
 * targets, 1,000 with the direct-loop control; at 200 ms, 1 and 1,000 rounds. (The 200 ms pass's control at 1,000 —
 * 100 s of a full run; 3.9–4.2 × one loop, the rounds 0.28–0.29 × it, in three runs on 2026-12-07 — is left to
 * `ROUNDHOUSE_BENCH_SCALE_LEVELS=1,1000 ROUNDHOUSE_BENCH_SCALE_LATENCY_MS=200`.) The emulator answers in zero-compute
 * mode (its learner costs nothing), so the figures measure orchestration, not the emulator's arithmetic.
 * `ROUNDHOUSE_BENCH_SCALE_LEVELS=1,300` and `ROUNDHOUSE_BENCH_SCALE_LATENCY_MS=1000` run one pass of your own.
 */
export function scalePasses(quick: boolean, env: NodeJS.ProcessEnv = process.env): ScalePass[] {
  if (env.ROUNDHOUSE_BENCH_SCALE_LEVELS) {
    const levels = env.ROUNDHOUSE_BENCH_SCALE_LEVELS.split(',').map(Number);
    if (levels[0] !== 1 || levels.some((n) => !Number.isInteger(n) || n < 1))
      throw new Error('ROUNDHOUSE_BENCH_SCALE_LEVELS: positive integers starting with 1, e.g. 1,300');
    const latency = Number(env.ROUNDHOUSE_BENCH_SCALE_LATENCY_MS ?? 1000);
    const dialect = env.ROUNDHOUSE_BENCH_SCALE_DIALECT === 'together' ? 'together' : 'baseten';
    return [{ prefix: '', operationLatencyMs: latency, dialect, levels, control: [levels[levels.length - 1]!], targets: {}, steps: 10 }];
  }
  if (quick)
    return [{ prefix: '', operationLatencyMs: 200, dialect: 'baseten', levels: [1, 3], control: [3], targets: { 3: 1.5 }, steps: 4 }];
  return [
    {
      prefix: '',
      operationLatencyMs: 1000,
      dialect: 'baseten',
      levels: [1, 100, 1000],
      control: [1000],
      targets: { 100: 1.1, 1000: 1.5 },
      steps: 10,
    },
    { prefix: '200ms_ops.', operationLatencyMs: 200, dialect: 'baseten', levels: [1, 1000], control: [], targets: {}, steps: 10 },
  ];
}

/**
 * Scale: N concurrent rounds on one worker process (a fresh process per N, so its peak RSS is that level's).
 * Per-step time of a round = its training phase (from history) / its steps; the figure is the mean over the N
 * rounds divided by the same for one round alone. The control runs the same training as N pipelined direct loops
 * at once on the same emulator and machine: its ratio is what the emulator and machine cost alone.
 */
export async function scaleBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  for (const pass of scalePasses(ctx.quick)) await scalePass(ctx, report, pass);
}

async function scalePass(ctx: BenchContext, report: Report, pass: ScalePass): Promise<void> {
  const { steps } = pass;
  const name = (n: number, rest: string) => `scale.${pass.prefix}${n}_rounds.${rest}`;
  const emulator = await startBenchEmulator({ operationLatencyMs: pass.operationLatencyMs, compute: 'none' });
  const roundInput = (campaignId: string) => {
    const input = benchRoundInput({ baseUrl: emulator.url, campaignId, steps, batchSize: 2, evalRows: 2 });
    if (pass.dialect === 'baseten') input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: emulator.url };
    return input;
  };
  let single: number | undefined;
  let directSingle: number | undefined;
  try {
    for (const n of pass.levels) {
      const taskQueue = `bench-scale-${n}-${Date.now()}`;
      const worker = startWorkerProcess(workerProcessEnv(ctx, taskQueue, { BASETEN_API_KEY: BENCH_BASETEN_KEY }));
      try {
        await worker.ready;
        const started = Date.now();
        const cpu = cpuMeter({ worker_process: worker.child.pid, dev_server: childPids('temporal')[0] });
        const handles = await startRounds(ctx, n, (i) => ({
          taskQueue,
          workflowId: `round-${i}-${taskQueue}`,
          args: [roundInput(`scale-${n}-${i}-${taskQueue}`)],
        }));
        // Waited for by one count a second, not n long polls: the waiting is the benchmark's, not the rounds' load.
        await waitForClosed(ctx, taskQueue);
        const settled = await Promise.allSettled(handles.map((h) => h.result()));
        const wallS = (Date.now() - started) / 1000;
        const used = cpu.end();
        const why = (r: PromiseSettledResult<RoundResult>) =>
          r.status === 'rejected'
            ? failureChain(r.reason)
            : r.value.status !== 'completed'
              ? `${r.value.status}`
              : `${r.value.stepsApplied} steps`;
        const bad = settled.filter((r) => r.status === 'rejected' || r.value.status !== 'completed' || r.value.stepsApplied !== steps);
        report({ name: name(n, 'failed_rounds'), value: bad.length, target: '= 0', met: bad.length === 0 });
        if (bad.length) {
          const counts = new Map<string, number>();
          for (const r of bad) counts.set(why(r), (counts.get(why(r)) ?? 0) + 1);
          note(`scale ${pass.prefix}${n}: ${bad.length} rounds failed: ${[...counts].map(([k, v]) => `${v} × ${k}`).join('; ')}`);
          throw new Error(`${bad.length} of ${n} rounds did not complete their ${steps} steps`);
        }
        // After the rounds, so nothing measured is running: eight fetches in flight, not one at a time.
        const fetchStarted = Date.now();
        const phases = await mapInFlight(handles, 8, async (h) => trainingPhase(await h.fetchHistory()));
        note(`scale ${pass.prefix}${n}: ${n} histories read in ${((Date.now() - fetchStarted) / 1000).toFixed(1)} s`);
        const perStep = phases.map((phase) => phase.ms / steps);
        const spans = phases.map((phase): [number, number] => [phase.startMs, phase.endMs]);
        report({ name: name(n, 'peak_rounds_training_at_once'), value: peakOverlap(spans), target: 'info' });
        const mean = perStep.reduce((a, v) => a + v, 0) / n;
        const worst = Math.max(...perStep);
        const rssMib = Math.round(peakRss(worker.child.pid!) / MIB);
        note(
          `scale ${pass.prefix}${n}: all rounds done in ${wallS.toFixed(1)} s; per step mean ${mean.toFixed(0)} ms, worst ${worst.toFixed(0)} ms; worker peak RSS ${rssMib} MiB`,
        );
        // Where the CPU went (2 cores = 2 CPU-seconds per second): the emulator lives in the bench process.
        note(
          `scale ${pass.prefix}${n}: CPU seconds over ${wallS.toFixed(1)} s wall: ${Object.entries(used)
            .map(([k, v]) => `${k} ${v.toFixed(1)}`)
            .join(', ')}`,
        );
        for (const [k, v] of Object.entries(used))
          report({ name: name(n, `cpu_share.${k}`), value: v / wallS, target: 'info; CPU-seconds per second' });
        if (n === 1) {
          single = mean;
          report({ name: `scale.${pass.prefix}1_round.ms_per_step`, value: mean, target: 'info' });
        } else {
          const ratio = mean / single!;
          const target = pass.targets[n];
          report({
            name: name(n, 'per_step_over_one_round'),
            value: ratio,
            target: target !== undefined ? `≤ ${target}` : 'info',
            met: target !== undefined ? ratio <= target : undefined,
          });
          report({ name: name(n, 'worst_per_step_over_one_round'), value: worst / single!, target: 'info' });
        }
        report({ name: name(n, 'worker_peak_rss_mib'), value: rssMib, target: `≤ ${RSS_LIMIT_MIB}`, met: rssMib <= RSS_LIMIT_MIB });
        if (pass.control.length > 0 && (n === 1 || pass.control.includes(n))) {
          // The control: the same training as n pipelined direct loops at once, on the same emulator and machine.
          const controlStarted = Date.now();
          const direct = await Promise.all(
            Array.from({ length: n }, (_v, i) =>
              runDirectLoop('pipelined', roundInput(`scale-direct-${n}-${i}-${taskQueue}`), `scale-${n}-${i}-${taskQueue}`),
            ),
          );
          note(`scale ${pass.prefix}${n}: the control's ${n} loops took ${((Date.now() - controlStarted) / 1000).toFixed(1)} s in all`);
          const directMean = direct.reduce((a, d) => a + d.trainingMs / d.steps, 0) / n;
          if (n === 1) directSingle = directMean;
          else {
            report({
              name: `scale.${pass.prefix}${n}_direct_loops.per_step_over_one_loop`,
              value: directMean / directSingle!,
              target: 'info; the emulator and machine alone',
            });
            report({
              name: name(n, `per_step_over_direct_loops_at_${n}`),
              value: mean / directMean,
              target: 'info; what Roundhouse adds at this concurrency',
            });
          }
          note(`scale ${pass.prefix}${n}: ${n} direct pipelined loops: per step mean ${directMean.toFixed(0)} ms`);
        }
      } finally {
        await worker.stop();
      }
    }
    const active = emulator.engine.ledger().active.length;
    report({ name: `scale.${pass.prefix}resources_left_active`, value: active, target: '= 0', met: active === 0 });
  } finally {
    await emulator.close();
  }
}

/** Starts n rounds, at most 100 start calls in flight at a time. */
async function startRounds(ctx: BenchContext, n: number, options: (i: number) => WorkflowStartOptions<typeof roundWorkflow>) {
  const handles = [];
  for (let from = 0; from < n; from += 100) {
    const batch = Array.from({ length: Math.min(100, n - from) }, (_v, k) => ctx.client.workflow.start(roundWorkflow, options(from + k)));
    handles.push(...(await Promise.all(batch)));
  }
  return handles;
}

/** `f` over `items`, at most `limit` calls in flight, the results in the items' order. */
async function mapInFlight<T, R>(items: T[], limit: number, f: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

/** Until no workflow on the task queue is running (visibility catches up within a second or so on the dev server). */
async function waitForClosed(ctx: BenchContext, taskQueue: string): Promise<void> {
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const running = await ctx.client.workflow.count(`TaskQueue = '${taskQueue}' AND ExecutionStatus = 'Running'`);
    if (running.count === 0) return;
  }
}

/** The most spans [start, end] that overlap at one instant. */
function peakOverlap(spans: [number, number][]): number {
  const edges = spans.flatMap(([a, b]) => [[a, 1] as const, [b, -1] as const]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let now = 0;
  let peak = 0;
  for (const [, d] of edges) peak = Math.max(peak, (now += d));
  return peak;
}

/** A workflow failure and its causes, one line: what a failed round died of. */
function failureChain(err: unknown): string {
  const parts: string[] = [];
  for (let e = err as { message?: string; cause?: unknown; type?: string } | undefined; e && parts.length < 4; e = e.cause as typeof e)
    parts.push(`${e.type ? `${e.type}: ` : ''}${(e.message ?? '?').slice(0, 160)}`);
  return parts.join(' ← ');
}

import os from 'node:os';
import { formatFigure, note, startBench, type BenchContext, type Figure, type Report } from './harness';
import { overheadBenchmark } from './overhead';
import { historyBenchmark } from './history';
import { recoveryBenchmark } from './recovery';
import { scaleBenchmark } from './scale';
import { cleanupBenchmark } from './cleanup';
import { artifactsBenchmark } from './artifacts';
import { cliBenchmark } from './cli';
import { pythonHopBenchmark } from './python-hop';
import { gatewayBenchmark } from './gateway';
import { environmentsBenchmark } from './environments';
import { promotionBenchmark } from './promotion';
import { customLossBenchmark } from './custom-loss';
import { sweepBenchmark } from './sweep';

/**
 * `npm run bench` runs every benchmark; `npm run bench -- <name> [<name>…]` runs some; `--quick` uses tiny sizes
 * (the harness self-test). Figures go to stdout as `name: value (target)` lines, progress to stderr. It exits 1
 * when a figure misses its target (or a benchmark fails), except with `--quick`, whose sizes are too small for them.
 */
const BENCHMARKS: Record<string, (ctx: BenchContext, report: Report) => Promise<void>> = {
  overhead: overheadBenchmark,
  history: historyBenchmark,
  recovery: recoveryBenchmark,
  scale: scaleBenchmark,
  cleanup: cleanupBenchmark,
  artifacts: artifactsBenchmark,
  cli: cliBenchmark,
  python: pythonHopBenchmark,
  gateway: gatewayBenchmark,
  environments: environmentsBenchmark,
  promotion: promotionBenchmark,
  'custom-loss': customLossBenchmark,
  sweep: sweepBenchmark,
};

/**
 * A benchmark past its own bound fails, and the whole run stops at its budget. The scale benchmark's 1,000 rounds
 * (twice: at 1 s and at 200 ms per operation) take most of it on 2 cores; everything else fits in 10 minutes.
 */
const BENCHMARK_TIMEOUT_MS = 30 * 60_000;
const RUN_BUDGET_MS = 50 * 60_000;

export async function main(argv: string[]): Promise<number> {
  const args = argv.slice(2);
  const quick = args.includes('--quick');
  const names = args.filter((a) => !a.startsWith('--'));
  const unknown = names.filter((n) => !(n in BENCHMARKS));
  if (unknown.length) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(', ')}; known: ${Object.keys(BENCHMARKS).join(', ')}\n`);
    return 2;
  }
  const selected = names.length ? names : Object.keys(BENCHMARKS);
  const started = Date.now();
  note(
    `${new Date().toISOString()} · ${os.cpus().length} cores · ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB · Node ${process.version} · ${selected.join(', ')}${quick ? ' (quick)' : ''}`,
  );
  const ctx = await startBench({ quick });
  const figures: Figure[] = [];
  const report: Report = (f) => {
    figures.push(f);
    process.stdout.write(`${formatFigure(f)}\n`);
  };
  let failed = 0;
  try {
    for (const name of selected) {
      const t0 = Date.now();
      const bound = Math.min(BENCHMARK_TIMEOUT_MS, started + RUN_BUDGET_MS - t0);
      let timer: NodeJS.Timeout | undefined;
      try {
        if (bound <= 0) throw new Error(`not run: the ${RUN_BUDGET_MS / 60_000}-minute budget of the whole run is spent`);
        await Promise.race([
          BENCHMARKS[name]!(ctx, report),
          new Promise(
            (_r, reject) => (timer = setTimeout(() => reject(new Error(`not finished after ${Math.round(bound / 1000)} s`)), bound)),
          ),
        ]);
      } catch (err) {
        failed += 1;
        report({
          name: `${name}.error`,
          value: JSON.stringify((err as Error).message ?? String(err)),
          target: 'must not happen',
          met: false,
        });
      } finally {
        clearTimeout(timer);
      }
      note(`${name} took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
  } finally {
    await ctx.close();
  }
  const missed = figures.filter((f) => f.met === false).length;
  note(
    `done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${figures.length} figures, ${missed} missed${quick && missed ? ' (not failing: --quick sizes are too small for the targets)' : ''}`,
  );
  return benchExitCode({ failed, missed, quick });
}

/** 1 when a benchmark failed, or a figure missed its target at full size; `--quick` (the self-test) checks only the plumbing. */
export function benchExitCode(run: { failed: number; missed: number; quick: boolean }): number {
  return run.failed > 0 || (run.missed > 0 && !run.quick) ? 1 : 0;
}

if (require.main === module) {
  main(process.argv).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`${(err as Error).stack ?? err}\n`);
      process.exit(1);
    },
  );
}

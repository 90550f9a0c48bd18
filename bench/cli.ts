import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { note, type BenchContext, type Report } from './harness';
import { ensureDist } from '../test/helpers/dist';

const root = path.resolve(__dirname, '..');

/** Median wall time (s) of `runs` cold starts of `bin/roundhouse.js status --help` with this environment. */
function coldStart(runs: number, env: NodeJS.ProcessEnv): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = process.hrtime.bigint();
    const run = spawnSync(process.execPath, [path.join(root, 'bin', 'roundhouse.js'), 'status', '--help'], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
    if (run.status !== 0) throw new Error(`roundhouse status --help exited ${run.status}: ${run.stderr.slice(-500)}`);
    times.push(Number(process.hrtime.bigint() - started) / 1e9);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

/**
 * The CLI's cold start: `roundhouse status --help` as a user runs it (the built CLI, bin/roundhouse.js's default
 * once dist/ is current) against the checkout's TypeScript sources through tsx (ROUNDHOUSE_FROM_SOURCE=1), each the
 * median of several fresh processes, side by side in one run.
 */
export async function cliBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const built = ensureDist();
  if (built.built) note(`cli: built dist/ first (${(built.ms / 1000).toFixed(0)} s)`);
  const runs = ctx.quick ? 3 : 9;
  const fromDist = coldStart(runs, {});
  const fromSource = coldStart(runs, { ROUNDHOUSE_FROM_SOURCE: '1' });
  report({ name: 'cli.cold_start.status_help.built_s', value: fromDist, target: '≤ 0.3', met: fromDist <= 0.3 });
  report({ name: 'cli.cold_start.status_help.source_s', value: fromSource, target: 'info' });
  report({ name: 'cli.cold_start.source_over_built', value: fromSource / fromDist, target: 'info' });
}

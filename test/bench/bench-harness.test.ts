import { spawn } from 'node:child_process';
import path from 'node:path';
import { benchExitCode } from '../../bench/run';

const root = path.resolve(__dirname, '../..');
/** `name: value (target)`, the target ending in ", met" / ", MISSED" when the figure has one. */
const FIGURE = /^([a-z0-9_.]+): (-?[0-9.]+|"[^"]*") \(([^()]+?)(, met|, MISSED)?\)$/;

function runBench(args: string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [require.resolve('tsx/cli'), 'bench/run.ts', ...args], { cwd: root, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

// Not a speed test: the figures' values are whatever this machine gives; this only keeps the harness working.
test('`bench -- history --quick` runs a real round and campaign and prints well-formed figure lines', async () => {
  const { code, stdout, stderr } = await runBench(['history', '--quick'], 120_000);
  // The dev server writes its banner to the inherited stdout; every figure line has the figure shape.
  const figures = stdout.split('\n').filter((l) => /^[a-z0-9_]+\.[a-z0-9_.]+: /.test(l));
  if (code !== 0) throw new Error(`bench exited ${code}:\n${stdout}\n${stderr.slice(-3000)}`);
  expect(figures.length).toBeGreaterThanOrEqual(8);
  for (const line of figures) expect(line).toMatch(FIGURE);
  const names = figures.map((l) => l.slice(0, l.indexOf(':')));
  expect(names).toEqual(
    expect.arrayContaining([
      'history.round.20_steps.events_per_step',
      'history.campaign_round.20_steps.events_per_step',
      'history.round.growth_40_over_20',
      'history.round.marginal_events_per_step',
      'history.round.hosted_speed.events_per_segment',
      'history.round.10s_steps.events_per_step',
    ]),
  );
  expect(names.some((n) => n.endsWith('.error'))).toBe(false);
  const perStep = Number(FIGURE.exec(figures.find((l) => l.startsWith('history.round.40_steps.events_per_step'))!)![2]);
  expect(perStep).toBeGreaterThan(0); // counted from a real history, not a placeholder
  // At hosted speed the round's segments were cut by time, each costing events.
  const figure = (name: string) => Number(FIGURE.exec(figures.find((l) => l.startsWith(`${name}:`))!)![2]);
  expect(figure('history.round.hosted_speed.segments')).toBeGreaterThanOrEqual(2);
  expect(figure('history.round.hosted_speed.events_per_segment')).toBeGreaterThan(0);
}, 130_000);

test('`bench -- python --quick` runs a GRPO round with the built-in reward and the same round with a Python reward, and prints the ratio', async () => {
  const { code, stdout, stderr } = await runBench(['python', '--quick'], 120_000);
  if (code !== 0) throw new Error(`bench exited ${code}:\n${stdout}\n${stderr.slice(-3000)}`);
  const figures = stdout.split('\n').filter((l) => /^[a-z0-9_]+\.[a-z0-9_.]+: /.test(l));
  for (const line of figures) expect(line).toMatch(FIGURE);
  const figure = (name: string) => Number(FIGURE.exec(figures.find((l) => l.startsWith(`python.reward.latency200ms.${name}:`))!)![2]);
  expect(figures.some((l) => l.includes('.error:'))).toBe(false);
  // One call workflow per step, counted and timed from the server's histories; the ratio is of two real step times.
  expect(figure('python_calls_per_step')).toBe(1);
  expect(figure('python_call_events_per_step')).toBeGreaterThan(0);
  expect(figure('python_call_ms')).toBeGreaterThan(0);
  expect(figure('builtin_ms_per_step')).toBeGreaterThan(0);
  expect(figure('python_over_builtin')).toBeCloseTo(figure('python_ms_per_step') / figure('builtin_ms_per_step'), 2);
}, 130_000);

test('an unknown benchmark name is refused with the list of known ones', async () => {
  const { code, stderr } = await runBench(['nosuch'], 30_000);
  expect(code).toBe(2);
  expect(stderr).toContain('known: overhead, history, recovery, scale, cleanup, artifacts, cli, python, gateway, environments, promotion');
}, 40_000);

test('a full run exits 1 when a figure misses its target or a benchmark fails; the quick self-test only when one fails', () => {
  expect(benchExitCode({ failed: 0, missed: 0, quick: false })).toBe(0);
  expect(benchExitCode({ failed: 0, missed: 1, quick: false })).toBe(1);
  expect(benchExitCode({ failed: 1, missed: 0, quick: false })).toBe(1);
  expect(benchExitCode({ failed: 0, missed: 3, quick: true })).toBe(0);
  expect(benchExitCode({ failed: 1, missed: 0, quick: true })).toBe(1);
});

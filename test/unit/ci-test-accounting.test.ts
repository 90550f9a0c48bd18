import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * CI counts a test as passed only when it ran: jest's results go to .roundhouse/test-counts.json through
 * test/reporters/counts-reporter.js, a skip that test/skip-allowlist.json does not allow fails CI
 * (scripts/ci-summary.js prints which, and the closing line), and a `return` in a test body is a lint error.
 */

const root = path.resolve(__dirname, '../..');
const reporter = path.join(root, 'test/reporters/counts-reporter.js');
const summary = path.join(root, 'scripts/ci-summary.js');

interface Skip {
  file: string;
  name: string;
  status: string;
  allowedBecause: string | null;
}

/** Runs jest on `files` in a fresh directory with the counts reporter and `allowed` as its allow-list; returns the counts file. */
function countsOfRun(files: Record<string, string>, allowed: Record<string, string>): Record<string, any> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-counts-'));
  for (const [name, code] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), code);
  fs.mkdirSync(path.join(dir, 'test'));
  fs.writeFileSync(path.join(dir, 'test/skip-allowlist.json'), JSON.stringify({ allowed }));
  const config = { rootDir: dir, testEnvironment: 'node', testMatch: ['**/*.fixture.js'], transform: {}, reporters: [reporter] };
  spawnSync(process.execPath, [require.resolve('jest/bin/jest'), '--config', JSON.stringify(config), '--runInBand', '--ci'], {
    cwd: dir,
    encoding: 'utf8',
  });
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, '.roundhouse/test-counts.json'), 'utf8'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs scripts/ci-summary.js on a counts file (or none) and npm test's exit status. */
function ciSummary(counts: Record<string, unknown> | undefined, status: number): { lines: string[]; exitCode: number | null } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-summary-'));
  const file = path.join(dir, 'test-counts.json');
  if (counts) fs.writeFileSync(file, JSON.stringify(counts));
  const run = spawnSync(process.execPath, [summary, file, String(status)], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  return { lines: run.stdout.trimEnd().split('\n'), exitCode: run.status };
}

describe('skipped tests are recorded by name and fail CI unless allowed', () => {
  let counts: Record<string, any>;
  beforeAll(() => {
    counts = countsOfRun(
      {
        'a.fixture.js': `
          test('passes', () => expect(1 + 1).toBe(2));
          test('fails', () => expect(1).toBe(2));
          test.skip('is skipped with a reason', () => {});
          test.skip('is skipped without one', () => {});
          test.todo('is still to write');
          describe.skip('a skipped group', () => test('of one', () => {}));
          (process.env.ROUNDHOUSE_NEVER_SET ? test : test.skip)('is skipped at run time', () => {});
        `,
        'b.fixture.js': `
          test.only('is focused', () => {});
          test('is left out by the only', () => {});
        `,
      },
      { 'is skipped with a reason': 'the fixture allows it' },
    );
  });

  test('the counts file has jest’s numbers and every skipped test by full name, allowed or not', () => {
    expect(counts).toMatchObject({ passed: 2, failed: 1, skipped: 6, notAllowedSkips: 5, testNamePattern: null });
    const skips: Skip[] = counts.skips;
    expect(skips.map((s) => [s.file, s.name, s.status, s.allowedBecause]).sort()).toEqual(
      [
        ['a.fixture.js', 'a skipped group of one', 'pending', null],
        ['a.fixture.js', 'is skipped at run time', 'pending', null],
        ['a.fixture.js', 'is skipped with a reason', 'pending', 'the fixture allows it'],
        ['a.fixture.js', 'is skipped without one', 'pending', null],
        ['a.fixture.js', 'is still to write', 'todo', null],
        ['b.fixture.js', 'is left out by the only', 'pending', null],
      ].sort(),
    );
  });

  test('CI fails, names the skips the allow-list does not, and counts them as failed in its closing line', () => {
    const { lines, exitCode } = ciSummary(counts, 1);
    expect(exitCode).toBe(1);
    expect(lines.at(-1)).toBe('2 passed, 6 failed, 1 skipped');
    expect(lines).toContain('== 5 skipped test(s) not on test/skip-allowlist.json (run them, or allow them there with why):');
    expect(lines).toContain('   b.fixture.js: is left out by the only (pending)');
    expect(lines).toContain('   a.fixture.js: is still to write (todo)');
    expect(lines.join('\n')).not.toContain('is skipped with a reason');
  });

  test('CI passes with only allowed skips; it fails when jest never reported, or npm test failed with no failed test', () => {
    const allowedOnly = { ...counts, failed: 0, skips: counts.skips.filter((s: Skip) => s.allowedBecause !== null), skipped: 1 };
    const passing = ciSummary(allowedOnly, 0);
    expect(passing.exitCode).toBe(0);
    expect(passing.lines.at(-1)).toBe('2 passed, 0 failed, 1 skipped');
    expect(ciSummary(undefined, 1)).toEqual({ lines: ['0 passed, 1 failed, 0 skipped'], exitCode: 1 });
    expect(ciSummary(allowedOnly, 1).lines.at(-1)).toBe('2 passed, 1 failed, 1 skipped');
  });
});

describe('a return in a test body is a lint error', () => {
  const cases: { code: string; flagged: boolean }[] = [
    { code: "test('t', () => { if (Date.now() > 0) return; expect(1).toBe(1); });", flagged: true },
    { code: "test.each([1])('t %s', async (n) => { if (n) return; expect(n).toBe(1); });", flagged: true },
    { code: "describe('d', () => { it('t', async () => { await Promise.resolve(); return; }); });", flagged: true },
    { code: "test('t', () => { const f = () => { return 1; }; expect(f()).toBe(1); });", flagged: false },
    { code: "function helper() { return 1; } test('t', () => { expect(helper()).toBe(1); });", flagged: false },
    { code: "beforeAll(() => { if (Date.now() > 0) return; }); test('t', () => { expect(1).toBe(1); });", flagged: false },
  ];
  let results: { ruleId: string | null; fatal?: boolean }[][] = [];
  beforeAll(() => {
    const probe = path.join(root, 'test/helpers/lint-snippets.mjs');
    const snippets = cases.map((c, i) => ({ filePath: `test/unit/return-probe-${i}.test.ts`, code: `${c.code}\n` }));
    results = JSON.parse(execFileSync(process.execPath, [probe], { input: JSON.stringify(snippets), encoding: 'utf8' }));
  });

  test.each(cases.map((c, i) => [c.flagged ? 'flags' : 'allows', c.code, i] as const))('%s: %s', (_verdict, _code, i) => {
    expect(results[i]!.filter((m) => m.fatal)).toEqual([]);
    const returns = results[i]!.filter((m) => m.ruleId === 'roundhouse/no-return-in-test');
    expect(returns).toHaveLength(cases[i]!.flagged ? 1 : 0);
  });
});

#!/usr/bin/env node
// `npm test`'s Python part: in the Python side's venv (scripts/python-env.js), ruff (lint and format) over every
// tracked Python file (python/ by python/pyproject.toml, the rest by ruff.toml, which extends it), mypy --strict over
// the package (its cache in <stateDir>/mypy-cache), and pytest, all three at once: a cold mypy takes half a minute
// of one core, pytest mostly waits on its sandboxed runs and subprocesses. pytest's counts go to
// <stateDir>/pytest-counts.json for CI's closing line (scripts/ci-summary.js); exits non-zero when anything failed.
'use strict';

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { ensurePythonEnv } = require('./python-env');

const root = path.join(__dirname, '..');
const stateDir = path.resolve(process.env.ROUNDHOUSE_STATE_DIR || path.join(root, '.roundhouse'));
const countsFile = path.join(stateDir, 'pytest-counts.json');
const junit = path.join(stateDir, 'pytest-results.xml');

/** Every tracked `*.py` (git's list), or, outside a git checkout, every one ruff finds from the root. */
function pythonFiles() {
  const listed = spawnSync('git', ['ls-files', '-z', '--', '*.py'], { cwd: root, encoding: 'utf8' });
  return listed.status === 0 ? listed.stdout.split('\0').filter(Boolean) : ['.'];
}

/** Runs a tool; resolves whether it passed. pytest's output goes straight through; the others' lines (their output
 * when they failed) are printed once everything has ended, so that they do not break into pytest's. */
const held = [];
function run(name, command, args, cwd = root) {
  const started = Date.now();
  const inherit = name === 'pytest';
  const child = spawn(command, args, { cwd, stdio: inherit ? 'inherit' : 'pipe' });
  let output = '';
  if (!inherit) for (const stream of [child.stdout, child.stderr]) stream.on('data', (d) => (output += d));
  return new Promise((resolve) => {
    let ended = false;
    const done = (status, error) => {
      if (ended) return; // a failed spawn reports 'error' and may report 'close' too
      ended = true;
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      const ok = status === 0;
      const line = `== ${name}: ${ok ? 'ok' : `FAILED (exit ${status})`} in ${seconds} s\n`;
      const said = !ok && !inherit ? `${line}${output}${error ? error.message : ''}\n` : line;
      if (inherit) process.stdout.write(said);
      else held.push(said);
      resolve(ok);
    };
    child.once('error', (error) => done(null, error));
    child.once('close', (status) => done(status));
  });
}

/** passed / failed / skipped from pytest's JUnit XML (its root element's counts), with the skipped tests' names. */
function countsOf(file) {
  const xml = fs.readFileSync(file, 'utf8');
  const suite = /<testsuite\b([^>]*)>/.exec(xml);
  const attr = (name) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(suite ? suite[1] : '')?.[1] ?? 0);
  const tests = attr('tests');
  const failed = attr('failures') + attr('errors');
  const skipped = attr('skipped');
  const skips = [...xml.matchAll(/<testcase\b[^>]*classname="([^"]*)"[^>]*name="([^"]*)"[^>]*>\s*<skipped\b[^>]*message="([^"]*)"/g)].map(
    (m) => ({ file: m[1], name: m[2], status: `skipped: ${m[3]}` }),
  );
  return { passed: tests - failed - skipped, failed, skipped, skips };
}

fs.mkdirSync(stateDir, { recursive: true });
fs.rmSync(countsFile, { force: true });
const python = ensurePythonEnv();
const bin = (tool) => path.join(path.dirname(python), tool);
const files = pythonFiles();
// Which sandbox the code-running rewards get on this machine, said in every run's log.
const sandbox = spawnSync(python, ['-m', 'roundhouse', 'sandbox'], { encoding: 'utf8' });
process.stdout.write(`== ${(sandbox.stdout || sandbox.stderr || 'sandbox: unknown').trim()}\n`);
fs.rmSync(junit, { force: true });
const started = Date.now();
Promise.all([
  run('ruff check', bin('ruff'), ['check', ...files]).then(
    async (ok) => (await run('ruff format', bin('ruff'), ['format', '--check', ...files])) && ok,
  ),
  run('mypy', bin('mypy'), ['--cache-dir', path.join(stateDir, 'mypy-cache')], path.join(root, 'python')),
  run('pytest', python, ['-m', 'pytest', '-q', `--junitxml=${junit}`], path.join(root, 'python')),
]).then(([ruffOk, mypyOk, tested]) => {
  process.stdout.write(held.join(''));
  const counts = fs.existsSync(junit) ? countsOf(junit) : { passed: 0, failed: 1, skipped: 0, skips: [] };
  fs.writeFileSync(countsFile, JSON.stringify(counts));
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  process.stdout.write(`== python: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped (${seconds} s)\n`);
  process.exitCode = ruffOk && mypyOk && tested && counts.failed === 0 ? 0 : 1;
});

#!/usr/bin/env node
// `npm test`'s Python part: in the Python side's venv (scripts/python-env.js), ruff (lint and format) over every
// tracked Python file (python/ by python/pyproject.toml, the rest by ruff.toml, which extends it), mypy --strict over
// the package, then pytest. pytest's counts go to
// <stateDir>/pytest-counts.json for CI's closing line (scripts/ci-summary.js); exits non-zero when anything failed.
'use strict';

const { spawnSync } = require('node:child_process');
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

function run(name, command, args, cwd = root) {
  const started = Date.now();
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', stdio: name === 'pytest' ? 'inherit' : 'pipe' });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const ok = result.status === 0;
  process.stdout.write(`== ${name}: ${ok ? 'ok' : `FAILED (exit ${result.status})`} in ${seconds} s\n`);
  if (!ok && name !== 'pytest')
    process.stdout.write(`${result.stdout ?? ''}${result.stderr ?? ''}${result.error ? result.error.message : ''}\n`);
  return ok;
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
const checks = [
  run('ruff check', bin('ruff'), ['check', ...files]),
  run('ruff format', bin('ruff'), ['format', '--check', ...files]),
  run('mypy', bin('mypy'), [], path.join(root, 'python')),
];
// Which sandbox the code-running rewards get on this machine, said in every run's log.
const sandbox = spawnSync(python, ['-m', 'roundhouse', 'sandbox'], { encoding: 'utf8' });
process.stdout.write(`== ${(sandbox.stdout || sandbox.stderr || 'sandbox: unknown').trim()}\n`);
fs.rmSync(junit, { force: true });
const tested = run('pytest', python, ['-m', 'pytest', '-q', `--junitxml=${junit}`], path.join(root, 'python'));
const counts = fs.existsSync(junit) ? countsOf(junit) : { passed: 0, failed: 1, skipped: 0, skips: [] };
fs.writeFileSync(countsFile, JSON.stringify(counts));
process.stdout.write(`== python: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped\n`);
process.exitCode = checks.every(Boolean) && tested && counts.failed === 0 ? 0 : 1;

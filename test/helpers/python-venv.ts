import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');

// eslint-disable-next-line @typescript-eslint/no-require-imports -- plain-JS installer shared with .ci/run
const { installOnce } = require('../../scripts/python-env.js') as {
  installOnce(dir: string, ready: () => boolean, install: () => void): void;
};

/** The official SDKs the tests run as real clients, pinned (each venv made on first use by the test that runs it). */
export const SDK_VENVS = {
  together: { requirements: ['together==3.1.1'], options: {} },
  tinker: { requirements: ['tinker==0.38.0'], options: {} },
  baseten: { requirements: ['baseten-loops==0.32.0'], options: { minPython: [3, 12] as [number, number] } }, // needs Python ≥ 3.12
};

/** The venv of an official SDK (made once; see SDK_VENVS). */
export function sdkVenv(name: keyof typeof SDK_VENVS): string {
  return ensureVenv(name, SDK_VENVS[name].requirements, SDK_VENVS[name].options);
}

export interface VenvOptions {
  /** The lowest Python the packages install on, e.g. [3, 12] for baseten-loops. Default: any python3. */
  minPython?: [number, number];
}

/**
 * `ROUNDHOUSE_PYTHON`, then `python3.12`, `python3.13`, `python3` on the PATH, then pyenv's installed versions
 * (its shims refuse a version that is not selected): the first new enough wins.
 */
function pythonCandidates(): string[] {
  const pyenv = path.join(process.env.PYENV_ROOT ?? path.join(os.homedir(), '.pyenv'), 'versions');
  const installed = fs.existsSync(pyenv)
    ? fs
        .readdirSync(pyenv)
        .filter((v) => /^3\.\d+\.\d+$/.test(v))
        .sort((a, b) => a.localeCompare(b, undefined, { numeric: true }))
        .map((v) => path.join(pyenv, v, 'bin', 'python3'))
    : [];
  return [process.env.ROUNDHOUSE_PYTHON, 'python3.12', 'python3.13', 'python3', ...installed].filter((p): p is string => Boolean(p));
}

function versionOf(python: string): [number, number] | undefined {
  const run = spawnSync(python, ['-c', 'import sys; print(*sys.version_info[:2])'], { encoding: 'utf8', timeout: 30_000 });
  if (run.status !== 0) return undefined;
  const [major, minor] = run.stdout.trim().split(' ').map(Number);
  return Number.isInteger(major) && Number.isInteger(minor) ? [major!, minor!] : undefined;
}

/** The interpreter to build a venv with; throws naming what was looked for and found when none is new enough. */
export function findPython(min?: [number, number]): { python: string; version: [number, number] } {
  const seen: string[] = [];
  for (const python of min ? pythonCandidates() : ['python3']) {
    const version = versionOf(python);
    seen.push(`${python}: ${version ? version.join('.') : 'not found'}`);
    if (version && (!min || version[0] > min[0] || (version[0] === min[0] && version[1] >= min[1]))) return { python, version };
  }
  throw new Error(
    `no Python${min ? ` ≥ ${min.join('.')}` : ' 3'} found (${seen.join('; ')}); install it, or set ROUNDHOUSE_PYTHON to its path`,
  );
}

/**
 * A Python virtual environment under .roundhouse/venvs/<name> with exactly these pinned packages, created once
 * and reused (a marker file records what was installed, and with which Python). Used to run the providers'
 * official SDKs as real clients.
 */
export function ensureVenv(name: string, requirements: string[], options: VenvOptions = {}): string {
  const dir = path.join(
    process.env.ROUNDHOUSE_STATE_DIR ? path.resolve(process.env.ROUNDHOUSE_STATE_DIR) : path.join(root, '.roundhouse'),
    'venvs',
    name,
  );
  const python = path.join(dir, 'bin', 'python');
  const marker = path.join(dir, 'roundhouse-requirements.txt');
  const wanted = [...requirements, ...(options.minPython ? [`# python >= ${options.minPython.join('.')}`] : [])].join('\n');
  const ready = () => fs.existsSync(python) && fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === wanted;
  // One installer at a time (CI installs the SDKs in the background while the tests start): the others wait for it.
  installOnce(dir, ready, () => {
    const base = findPython(options.minPython);
    fs.rmSync(dir, { recursive: true, force: true });
    execFileSync(base.python, ['-m', 'venv', dir], { stdio: 'inherit' });
    execFileSync(python, ['-m', 'pip', 'install', '--disable-pip-version-check', '-q', ...requirements], {
      stdio: 'inherit',
      timeout: 600_000,
    });
    fs.writeFileSync(marker, wanted);
  });
  return python;
}

/** Runs a Python script to its end (killed after `timeoutMs`), with extra environment variables. */
export function runPython(
  python: string,
  script: string,
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(python, [script], { env: { ...process.env, ...env }, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

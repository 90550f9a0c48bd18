import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensureVenv } from '../../../test/helpers/python-venv';
import { freePort } from '../../../test/helpers/ports';
import { stopProcessGroup } from './process-groups';
import type { Target } from './target';
import type { Teardown } from './teardown';

// SkyRL 0.4.0's Tinker-API server (JAX on CPU) for a tiny random Qwen3 built here, on loopback: what
// `npm run conformance:skyrl` runs Roundhouse against. FINDINGS.md says how the server was found to behave.

const here = __dirname;
const repoRoot = path.resolve(here, '../../..');

/** `aiohttp`: the `tinker` extra forgets it; `transformers`: builds the model. Pinned to what the findings ran. */
export const SKYRL_REQUIREMENTS = ['skyrl[tinker,jax]==0.4.0', 'aiohttp==3.14.5', 'transformers==5.16.1'];

/** SkyRL never checks the key (and the client asks for a `tml-` one only of the hosted service). */
const API_KEY = 'conformance-skyrl';

/** Whether `python` runs and is 3.12; its real path (a pyenv shim resolves to the interpreter it runs). */
function python312At(python: string): string | undefined {
  const run = spawnSync(python, ['-c', 'import sys; print(sys.version_info[:2] == (3, 12), sys.executable)'], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  const [is312, executable] = run.status === 0 ? run.stdout.trim().split(' ') : [];
  return is312 === 'True' ? executable : undefined;
}

/**
 * Python 3.12 (SkyRL 0.4.0 wants ≥ 3.12; the findings ran 3.12): pyenv's newest 3.12.x (`PYENV_ROOT`, else
 * `pyenv root`), else `python3.12` on the PATH. Throws naming where it looked.
 */
export function findPython312(): string {
  const pyenvRoot = process.env.PYENV_ROOT ?? spawnSync('pyenv', ['root'], { encoding: 'utf8' }).stdout?.trim();
  const versions = pyenvRoot ? path.join(pyenvRoot, 'versions') : undefined;
  const installed =
    versions && fs.existsSync(versions)
      ? fs
          .readdirSync(versions)
          .filter((v) => /^3\.12\.\d+$/.test(v))
          .sort((a, b) => b.localeCompare(a, undefined, { numeric: true }))
          .map((v) => path.join(versions, v, 'bin', 'python3.12'))
      : [];
  for (const python of [...installed, 'python3.12']) {
    const found = python312At(python);
    if (found) return found;
  }
  throw new Error(
    `SkyRL needs Python 3.12 and none was found (pyenv: ${versions ?? 'no pyenv root'}${installed.length ? `, tried ${installed.join(', ')}` : ', no 3.12.x'}; ` +
      '`python3.12` on the PATH: not found or not 3.12). Install it, e.g. `pyenv install 3.12`.',
  );
}

/**
 * The cached venv `.roundhouse/venvs/skyrl` (several GB, minutes to make the first time): made with Python 3.12 by the
 * repo's venv helper, which reuses it while its pinned requirements stay the same.
 */
export function skyrlVenv(log: (line: string) => void): { python: string; venv: string; seconds: number; fresh: boolean } {
  const started = Date.now();
  const python312 = findPython312();
  const previous = process.env.ROUNDHOUSE_PYTHON;
  process.env.ROUNDHOUSE_PYTHON = python312; // the helper's first choice
  let python: string;
  let markerBefore: number | undefined;
  try {
    const dir = path.join(
      process.env.ROUNDHOUSE_STATE_DIR ? path.resolve(process.env.ROUNDHOUSE_STATE_DIR) : path.join(repoRoot, '.roundhouse'),
      'venvs',
      'skyrl',
    );
    markerBefore = fs.statSync(path.join(dir, 'roundhouse-requirements.txt'), { throwIfNoEntry: false })?.mtimeMs;
    if (markerBefore === undefined) log(`installing ${SKYRL_REQUIREMENTS.join(' ')} into ${dir} with ${python312} (several GB, minutes)`);
    python = ensureVenv('skyrl', SKYRL_REQUIREMENTS, { minPython: [3, 12] });
  } finally {
    if (previous === undefined) delete process.env.ROUNDHOUSE_PYTHON;
    else process.env.ROUNDHOUSE_PYTHON = previous;
  }
  const venv = path.dirname(path.dirname(python));
  const markerAfter = fs.statSync(path.join(venv, 'roundhouse-requirements.txt')).mtimeMs;
  return { python, venv, seconds: (Date.now() - started) / 1000, fresh: markerAfter !== markerBefore };
}

/**
 * The tiny random Qwen3 (make_tiny_qwen3.py: 336k parameters, the emulator's tiny-chat tokenizer, nothing
 * downloaded), built once beside the venv and rebuilt when that tokenizer changes.
 */
export function tinyQwen3(python: string, dir: string): { seconds: number; built: boolean } {
  const started = Date.now();
  const tokenizer = path.join(repoRoot, 'emulator', 'models', 'tiny-chat', 'tokenizer.json');
  const current =
    fs.existsSync(path.join(dir, 'model.safetensors')) &&
    fs.existsSync(path.join(dir, 'tokenizer.json')) &&
    fs.readFileSync(path.join(dir, 'tokenizer.json')).equals(fs.readFileSync(tokenizer));
  if (current) return { seconds: (Date.now() - started) / 1000, built: false };
  fs.rmSync(dir, { recursive: true, force: true });
  const run = spawnSync(python, [path.join(here, 'make_tiny_qwen3.py'), dir], { encoding: 'utf8', timeout: 600_000 });
  if (run.status !== 0) throw new Error(`make_tiny_qwen3.py failed (${run.status ?? run.signal}): ${run.stderr.slice(-2000)}`);
  return { seconds: (Date.now() - started) / 1000, built: true };
}

/**
 * Installs (or reuses) the venv, builds (or reuses) the model, and starts the server on 127.0.0.1 with serve.py
 * (its `uv` stand-in, JAX on CPU); resolves once the engine has loaded the model. The server runs in its own process
 * group, stopped by `stop()`.
 */
export async function startSkyrl(log: (line: string) => void, teardown: Teardown): Promise<Target> {
  const install = skyrlVenv(log);
  const modelDir = path.join(install.venv, '..', '..', 'conformance', 'skyrl', 'tiny-qwen3');
  const model = tinyQwen3(install.python, modelDir);
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-skyrl-'));
  const port = await freePort();
  const started = Date.now();
  // serve.py starts the server in a session of its own and exits once it is ready; it runs in a group of its own too.
  const serve = spawn(
    install.python,
    [
      path.join(here, 'serve.py'),
      ...['--model', modelDir, '--port', String(port), '--workdir', workdir, '--venv', install.venv, '--ready-timeout', '600'],
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  // serve.py writes the server's process group id before it waits for it: a stop during start-up stops it too.
  const pidFile = path.join(workdir, 'server.pid');
  const serverPgid = () => (fs.existsSync(pidFile) ? Number(fs.readFileSync(pidFile, 'utf8')) || undefined : undefined);
  teardown.add(async (keepFiles) => {
    await stopProcessGroup(serve.pid);
    await stopProcessGroup(serverPgid());
    if (!keepFiles) fs.rmSync(workdir, { recursive: true, force: true });
  });
  let out = '';
  let err = '';
  serve.stdout.on('data', (d: Buffer) => (out += d.toString()));
  serve.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((resolve) => serve.once('exit', resolve));
  const ready = out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { ready: boolean; url?: string; startup_seconds?: number })
    .find((l) => l.ready);
  if (code !== 0 || !ready?.url) {
    throw new Error(
      `the SkyRL server (log: ${path.join(workdir, 'server.log')}) did not start (serve.py exit ${code}): ${(err || out).slice(-2000)}`,
    );
  }
  const modelName = fs.realpathSync(modelDir); // capabilities name the model by the folder serve.py passed
  return {
    name: 'skyrl',
    provider: { kind: 'tinker', baseUrl: ready.url, model: modelName, tokenizer: modelName },
    apiKey: API_KEY,
    setup: [
      `install ${install.seconds.toFixed(1)} s (${install.fresh ? 'fresh venv' : 'cached venv'})`,
      `model ${model.seconds.toFixed(1)} s (${model.built ? 'built' : 'cached'})`,
      `server start ${((Date.now() - started) / 1000).toFixed(1)} s`,
    ],
    files: workdir,
    loadedModels: () => loadedModels(ready.url!),
  };
}

/** Models the server still holds (`get_info` status other than unloaded), of every training run it lists. */
async function loadedModels(url: string): Promise<string[]> {
  const runs = (await (await fetch(`${url}/api/v1/training_runs?limit=1000`)).json()) as { training_runs: { training_run_id: string }[] };
  const loaded: string[] = [];
  for (const { training_run_id: id } of runs.training_runs) {
    const res = await fetch(`${url}/api/v1/get_info`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({ model_id: id, type: 'get_info' }),
    });
    const info = (await res.json()) as { status?: string };
    if (info.status !== 'unloaded') loaded.push(id);
  }
  return loaded;
}

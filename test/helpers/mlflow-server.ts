import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports';
import { ensureVenv } from './python-venv';

/** The MLflow tracking server the tests run (PyPI `mlflow`, pinned), in its own venv. */
export const MLFLOW_REQUIREMENTS = ['mlflow==3.17.2'];

export interface RunningMlflow {
  uri: string;
  close(): Promise<void>;
}

/**
 * `mlflow server` on loopback with a SQLite backend and its artifact proxy over a scratch directory: a real process
 * speaking MLflow's REST API. Waits until /health answers.
 */
export async function startMlflowServer(): Promise<RunningMlflow> {
  const python = ensureVenv('mlflow', MLFLOW_REQUIREMENTS);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-mlflow-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    python,
    [
      '-m',
      'mlflow',
      'server',
      '--backend-store-uri',
      `sqlite:///${path.join(dir, 'mlflow.db')}`,
      '--artifacts-destination',
      path.join(dir, 'artifacts'),
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--workers',
      '1',
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      // Its own process group, so closing it stops its uvicorn workers too; no job consumers (7 processes, 1.6 GB).
      detached: true,
      env: { ...process.env, MLFLOW_ENABLE_TELEMETRY: 'false', DO_NOT_TRACK: 'true', MLFLOW_SERVER_ENABLE_JOB_EXECUTION: 'false' },
    },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-6000)));
  const uri = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`mlflow server exited (${child.exitCode}): ${stderr}`);
    try {
      if ((await fetch(`${uri}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() - started > 120_000) throw new Error(`mlflow server did not answer within 120 s: ${stderr}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    uri,
    async close() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        process.kill(-child.pid!, 'SIGTERM');
        const killer = setTimeout(() => {
          try {
            process.kill(-child.pid!, 'SIGKILL');
          } catch {
            // the group is gone
          }
        }, 10_000);
        await exited;
        clearTimeout(killer);
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A run as MLflow's `runs/search` answers it. */
export interface SearchedRun {
  info: { run_id: string; run_name: string; status: string };
  data: { tags?: { key: string; value: string }[]; params?: { key: string; value: string }[] };
}

/** Every run of an experiment (up to 100), read through MLflow's REST API. */
export async function runsOf(uri: string, experimentName: string): Promise<SearchedRun[]> {
  const exp = (await (
    await fetch(`${uri}/api/2.0/mlflow/experiments/get-by-name?experiment_name=${encodeURIComponent(experimentName)}`)
  ).json()) as { experiment: { experiment_id: string } };
  const res = await fetch(`${uri}/api/2.0/mlflow/runs/search`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ experiment_ids: [exp.experiment.experiment_id], max_results: 100 }),
  });
  return ((await res.json()) as { runs: SearchedRun[] }).runs;
}

export const tagOf = (run: SearchedRun, key: string) => run.data.tags?.find((t) => t.key === key)?.value;
export const paramOf = (run: SearchedRun, key: string) => run.data.params?.find((p) => p.key === key)?.value;

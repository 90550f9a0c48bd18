import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { CampaignSpec } from '../config/io/spec';
import { nextDataCall, pythonChecksOf } from '../config/rules/python-calls';
import { packageRoot } from './temporal-server';

/**
 * Python workers for a command that runs a campaign in this process (`roundhouse demo --python <file.py>`): one
 * `python -m roundhouse worker` per task queue the spec names, serving the user's files, stopped with the command.
 * The interpreter is ROUNDHOUSE_PYTHON_WORKER, else the venv `npm run python:install` makes, else python3 (with
 * `pip install ./python` done by hand).
 */

/** The task queues of every Python function a campaign (any stage of it) calls. */
export function pythonTaskQueues(spec: CampaignSpec): string[] {
  const blocks = spec.stages ?? [spec];
  const queues = blocks.flatMap((b) => [
    ...pythonChecksOf(b).map((c) => c.call.taskQueue),
    ...(nextDataCall(b.rounds.nextData) ? [nextDataCall(b.rounds.nextData)!.taskQueue] : []),
  ]);
  return [...new Set(queues)];
}

export function pythonInterpreter(env: NodeJS.ProcessEnv = process.env): string {
  if (env.ROUNDHOUSE_PYTHON_WORKER) return env.ROUNDHOUSE_PYTHON_WORKER;
  const venv = path.join(
    path.resolve(env.ROUNDHOUSE_STATE_DIR ?? path.join(packageRoot(), '.roundhouse')),
    'venvs',
    'python',
    'bin',
    'python',
  );
  return fs.existsSync(venv) ? venv : 'python3';
}

export interface RunningPythonWorkers {
  pids: number[];
  stop(): Promise<void>;
}

/** Starts a worker per task queue and resolves once each polls (its "ready" line); rejects with its output if one exits. */
export async function startPythonWorkers(options: {
  files: string[];
  taskQueues: string[];
  address: string;
  env?: NodeJS.ProcessEnv;
  readyTimeoutMs?: number;
}): Promise<RunningPythonWorkers> {
  const python = pythonInterpreter(options.env);
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGTERM');
          }),
      ),
    );
  };
  try {
    for (const taskQueue of options.taskQueues) {
      const child = spawn(python, ['-m', 'roundhouse', 'worker', ...options.files.map((f) => path.resolve(f)), '--task-queue', taskQueue], {
        env: { ...(options.env ?? process.env), TEMPORAL_ADDRESS: options.address },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      await new Promise<void>((resolve, reject) => {
        let output = '';
        const timer = setTimeout(
          () => reject(new Error(`the Python worker for task queue '${taskQueue}' did not start in time:\n${output}`)),
          options.readyTimeoutMs ?? 60_000,
        );
        const take = (d: Buffer) => {
          output = (output + d.toString()).slice(-8000);
          if (output.includes('roundhouse python worker ready')) {
            clearTimeout(timer);
            resolve();
          }
        };
        child.stdout!.on('data', take);
        child.stderr!.on('data', take);
        child.once('error', (err) => {
          clearTimeout(timer);
          reject(new Error(`could not start ${python} (${err.message}): run \`npm run python:install\`, or set ROUNDHOUSE_PYTHON_WORKER`));
        });
        child.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`the Python worker for task queue '${taskQueue}' exited (${code}):\n${output}`));
        });
      });
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { pids: children.map((c) => c.pid!), stop };
}

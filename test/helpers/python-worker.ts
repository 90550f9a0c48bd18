import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- plain-JS installer shared with .ci/run
export const { ensurePythonEnv } = require('../../scripts/python-env.js') as { ensurePythonEnv(): string };

/** The functions the Python-worker tests register (test/python/functions.py). */
export const TEST_FUNCTIONS = path.join(__dirname, '..', 'python', 'functions.py');

/** A real `python -m roundhouse worker` process on a task queue. */
export interface PythonWorker {
  process: ChildProcess;
  pid: number;
  /** Everything it printed so far. */
  output(): string;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM (a graceful shutdown), and wait for the exit. */
  stop(): Promise<void>;
  /** How the process ended, once it has. */
  exit: Promise<WorkerExit>;
}

/** How a worker process ended, and when (Date.now()). */
export interface WorkerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  at: number;
}

/** Starts a Python worker serving `sources` on `taskQueue` against `address`; resolves once it polls. */
export async function startPythonWorker(options: {
  address: string;
  taskQueue: string;
  sources?: string[];
  env?: Record<string, string>;
  /** The interpreter (default: the Python side's venv, scripts/python-env.js). */
  python?: string;
}): Promise<PythonWorker> {
  const python = options.python ?? ensurePythonEnv();
  const child = spawn(python, ['-m', 'roundhouse', 'worker', ...(options.sources ?? [TEST_FUNCTIONS]), '--task-queue', options.taskQueue], {
    env: { ...process.env, TEMPORAL_ADDRESS: options.address, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<WorkerExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the Python worker did not start in 60 s:\n${output}`)), 60_000);
    const check = () => {
      if (output.includes('roundhouse python worker ready')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the Python worker exited (${code}) before it was ready:\n${output}`));
    });
  });
  const signal = async (name: NodeJS.Signals): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(name);
    await exited;
  };
  return {
    process: child,
    pid: child.pid!,
    output: () => output,
    kill: () => signal('SIGKILL'),
    // SIGTERM lets the worker drain; one still draining after 30 s (an activity that will not end) is killed.
    stop: async () => {
      const timer = setTimeout(() => void signal('SIGKILL'), 30_000);
      try {
        await signal('SIGTERM');
      } finally {
        clearTimeout(timer);
      }
    },
    exit: exited,
  };
}

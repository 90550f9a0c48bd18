import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from '@temporalio/worker';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import { startTestEmulator, type RunningEmulator } from './emulator';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from './temporal';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** What a CLI test drives: the jest dev server, the emulator, an in-process worker, and the CLI's environment for them. */
export interface CliStack {
  temporal: TestTemporal;
  emulator: RunningEmulator;
  providers: ProviderRegistry;
  taskQueue: string;
  stateDir: string;
  /** The environment a `roundhouse` process needs to reach this stack. */
  env: Record<string, string>;
  close(): Promise<void>;
}

export async function startCliStack(name: string): Promise<CliStack> {
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator({ operationLatencyMs: 5 });
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `rh-${name}-`));
  const providers = new ProviderRegistry({ stateDir });
  const taskQueue = uniqueTaskQueue(name);
  const worker: Worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: 'default',
    taskQueue,
    workflowBundle: await bundleWorkflows(),
    providers,
  });
  const running = worker.run();
  return {
    temporal,
    emulator,
    providers,
    taskQueue,
    stateDir,
    env: {
      TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
      ROUNDHOUSE_TASK_QUEUE: taskQueue,
      ROUNDHOUSE_STATE_DIR: stateDir,
      ROUNDHOUSE_EMULATOR_URL: emulator.url,
      ROUNDHOUSE_LOG_LEVEL: 'warn',
    },
    async close() {
      worker.shutdown();
      await running;
      await providers.close();
      await emulator.close();
      await temporal.close();
    },
  };
}

/** Runs the CLI entry `bin` as its own process with `env` added, and collects its output and exit code. */
export function runCli(bin: string, args: string[], env: Record<string, string>, timeoutMs = 120_000): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, ...env }, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

import { spawn } from 'node:child_process';
import { Connection } from '@temporalio/client';
import type { WorkerSettings } from '../../../config/io/worker-env';
import { resolveTemporalExecutable, startTemporal, type TemporalServer } from '../../../workers/temporal-server';
import { freePort } from '../../../test/helpers/ports';
import { stopProcessGroup } from './process-groups';

/**
 * A Temporal dev server (in memory, on loopback) in a process group of its own, its banner and logs kept off the
 * command's output (the SDK's dev server prints to ours). With TEMPORAL_ADDRESS set, or no Temporal CLI on this
 * machine, the repo's startTemporal decides instead.
 */
export async function startQuietTemporal(settings: WorkerSettings): Promise<TemporalServer> {
  const executable = settings.address ? undefined : resolveTemporalExecutable(settings);
  if (!executable?.path) return startTemporal(settings);
  const port = await freePort();
  const args = ['server', 'start-dev', '--headless', '--ip', '127.0.0.1', '--port', String(port), '--log-level', 'error'];
  if (settings.namespace !== 'default') args.push('--namespace', settings.namespace); // default always exists
  args.push('--dynamic-config-value', 'frontend.WorkflowPauseEnabled=true'); // as startTemporal sets it
  const child = spawn(executable.path, args, { detached: true, stdio: 'ignore' });
  const address = `127.0.0.1:${port}`;
  const stop = () => stopProcessGroup(child.pid);
  for (const deadline = Date.now() + 60_000; ;) {
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1_000 });
      await connection.workflowService.describeNamespace({ namespace: settings.namespace });
      await connection.close();
      break;
    } catch (err) {
      if (Date.now() > deadline || child.exitCode !== null) {
        await stop();
        throw new Error(`the Temporal dev server (${executable.path}) did not start at ${address}: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return { address, namespace: settings.namespace, source: executable.source, executable: executable.path, stop };
}

import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadWorkerSettings, type WorkerSettings } from '../../config/worker-env';
import { connectClient, connectWorker, temporalClient } from '../../workers/temporal-server';

/** Connections to the run's shared dev server (started by test/global-setup.ts). */
export interface TestTemporal {
  settings: WorkerSettings;
  client: Client;
  nativeConnection: NativeConnection;
  close(): Promise<void>;
}

export async function connectTestTemporal(): Promise<TestTemporal> {
  const settings = loadWorkerSettings();
  if (!settings.address) throw new Error('TEMPORAL_ADDRESS is not set: the jest global setup did not start a server');
  const connection: Connection = await connectClient(settings);
  const nativeConnection = await connectWorker(settings);
  return {
    settings,
    client: temporalClient(settings, connection),
    nativeConnection,
    async close() {
      await connection.close();
      await nativeConnection.close();
    },
  };
}

/** A task queue no other test uses, so parallel test files never steal each other's tasks. */
export function uniqueTaskQueue(label: string): string {
  return `test-${label}-${randomUUID().slice(0, 8)}`;
}

/** Bundle the workflows once per test file (beforeAll) and hand the bundle to every worker in it. */
export async function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  return bundleWorkflowCode({ workflowsPath: require.resolve('../../workflows'), logger: quiet });
}

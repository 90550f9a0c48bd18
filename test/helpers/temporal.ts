import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadWorkerSettings, type WorkerSettings } from '../../config/io/worker-env';
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

/** Where the jest run's one workflow bundle is written (test/global-setup.ts); unset outside a jest run. */
export const SHARED_BUNDLE_ENV = 'ROUNDHOUSE_TEST_WORKFLOW_BUNDLE_DIR';

/** Bundles the workflows (webpack, several CPU-seconds) into `dir`: `workflow-bundle.js` and its source map. */
export async function writeWorkflowBundle(dir: string): Promise<void> {
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  const { code, sourceMap } = await bundleWorkflowCode({ workflowsPath: require.resolve('../../workflows'), logger: quiet });
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'workflow-bundle.js.map'), sourceMap);
  fs.writeFileSync(path.join(dir, 'workflow-bundle.js'), code);
}

/** The workflows bundle for in-process workers: the run's shared one (bundled once in the global setup), or a fresh one. */
export async function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  const dir = process.env[SHARED_BUNDLE_ENV];
  if (!dir) {
    const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
    return bundleWorkflowCode({ workflowsPath: require.resolve('../../workflows'), logger: quiet });
  }
  return {
    code: fs.readFileSync(path.join(dir, 'workflow-bundle.js'), 'utf8'),
    sourceMap: fs.readFileSync(path.join(dir, 'workflow-bundle.js.map'), 'utf8'),
  };
}

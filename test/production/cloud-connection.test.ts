import { randomBytes } from 'node:crypto';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadWorkerSettings, type WorkerSettings } from '../../config/io/worker-env';
import { Connection } from '@temporalio/client';
import { connectClient, connectionOptions, connectWorker, temporalClient } from '../../workers/temporal-server';
import { createRoundhouseWorker } from '../../workers/worker';
import { bundleWorkflows, uniqueTaskQueue } from '../helpers/temporal';
import { makeTestPki, startTlsFront, type TestPki } from './tls-front';
import { preflightWorkflow } from '../../workflows';

/**
 * Temporal Cloud's two ways in, end to end: the worker's and the client's connections are built from the environment
 * by workers/temporal-server.ts and go through a TLS front (like Cloud's edge) to the test's dev server.
 */
let bundle: WorkflowBundleWithSourceMap;
let pki: TestPki;

beforeAll(async () => {
  bundle = await bundleWorkflows();
  pki = makeTestPki();
});

const START = '/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution';
const POLL = '/temporal.api.workflowservice.v1.WorkflowService/PollActivityTaskQueue';

/** A preflight round trip (client starts, worker runs the activity) over connections made from `settings`. */
async function preflightThrough(settings: WorkerSettings): Promise<unknown> {
  const clientConnection = await connectClient(settings);
  const workerConnection = await connectWorker(settings);
  try {
    const taskQueue = uniqueTaskQueue('cloud');
    const worker = await createRoundhouseWorker({
      connection: workerConnection,
      namespace: settings.namespace,
      taskQueue,
      workflowBundle: bundle,
    });
    return await worker.runUntil(
      temporalClient(settings, clientConnection).workflow.execute(preflightWorkflow, {
        taskQueue,
        workflowId: `preflight-${taskQueue}`,
        args: ['over TLS'],
      }),
    );
  } finally {
    await clientConnection.close();
    await workerConnection.close();
  }
}

test('API key (TEMPORAL_API_KEY): TLS turns on and the worker and the client send the key as a bearer token on every call', async () => {
  const front = await startTlsFront(pki, process.env.TEMPORAL_ADDRESS!, { requireClientCert: false });
  const apiKey = `cloud-key-${randomBytes(8).toString('hex')}`;
  try {
    const settings = loadWorkerSettings({
      TEMPORAL_ADDRESS: front.address,
      TEMPORAL_NAMESPACE: process.env.TEMPORAL_NAMESPACE ?? 'default',
      TEMPORAL_API_KEY: apiKey,
      TEMPORAL_TLS_CA_PATH: pki.ca,
      TEMPORAL_TLS_SERVER_NAME: pki.serverName,
    });
    expect(await preflightThrough(settings)).toMatchObject({ greeting: 'over TLS' });
    const paths = front.seen.map((s) => s.path);
    expect(paths).toEqual(expect.arrayContaining([START, POLL])); // the client's calls and the worker's
    expect(front.seen.filter((s) => s.authorization !== `Bearer ${apiKey}`)).toEqual([]);
  } finally {
    await front.close();
  }
});

test("mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH/CLIENT_KEY_PATH, Temporal's standard names): both connections present the client certificate; without it the server refuses", async () => {
  const front = await startTlsFront(pki, process.env.TEMPORAL_ADDRESS!, { requireClientCert: true });
  try {
    const base = {
      TEMPORAL_ADDRESS: front.address,
      TEMPORAL_NAMESPACE: process.env.TEMPORAL_NAMESPACE ?? 'default',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.ca,
      TEMPORAL_TLS_SERVER_NAME: pki.serverName,
    };
    const settings = loadWorkerSettings({
      ...base,
      TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: pki.clientKey,
    });
    expect(await preflightThrough(settings)).toMatchObject({ greeting: 'over TLS' });
    expect(front.seen.map((s) => s.path)).toEqual(expect.arrayContaining([START, POLL]));
    expect(front.seen.filter((s) => s.clientCertCn !== 'roundhouse-worker')).toEqual([]);

    const withoutCertificate = loadWorkerSettings(base);
    await expect(Connection.connect({ ...connectionOptions(withoutCertificate, front.address), connectTimeout: 2_000 })).rejects.toThrow();
    expect(front.seen.filter((s) => s.clientCertCn !== 'roundhouse-worker')).toEqual([]); // the refused call never got through
  } finally {
    await front.close();
  }
});

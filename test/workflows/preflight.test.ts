import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { createRoundhouseWorker } from '../../workers/worker';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { preflightWorkflow } from '../../workflows';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
});

afterAll(async () => {
  await temporal?.close();
});

test('a workflow runs its activity on a real worker and returns the activity result through the server', async () => {
  const taskQueue = uniqueTaskQueue('preflight');
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
  });
  const workflowId = `preflight-${taskQueue}`;
  const result = await worker.runUntil(temporal.client.workflow.execute(preflightWorkflow, { taskQueue, workflowId, args: ['ping'] }));
  expect(result).toEqual({ workflowId, workerPid: process.pid, workerNode: process.version, greeting: 'ping' });

  // The server recorded the activity in the workflow's history.
  const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
  const scheduled = history.events?.filter((e) => e.activityTaskScheduledEventAttributes) ?? [];
  expect(scheduled.map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name)).toEqual(['describeWorker']);
});

import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ApplicationFailure, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { CampaignSpec } from '../../config/io/spec';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { CampaignInput } from '../../workflows/campaign/contract';
import { campaignChecksWorkflow, campaignWorkflow, preflightWorkflow } from '../../workflows';
import { testReportDir } from '../helpers/artifacts';
import { arithmeticStagesSpec } from '../helpers/campaign';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { startPythonWorker, TEST_FUNCTIONS, type PythonWorker } from '../helpers/python-worker';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 50 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-preflight-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
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

describe('a campaign checks every stage before its first round provisions', () => {
  const CHECKED_GAME = path.join(__dirname, '..', 'python', 'vf_checked_game.py');
  let python: PythonWorker | undefined;
  afterEach(async () => {
    await python?.stop();
    python = undefined;
  });

  /** Stage 1 an SFT stage that would train fine; stage 2 (rl) a GRPO stage with the given `round.grpo` block. */
  const twoStages = (grpo: string): CampaignSpec =>
    arithmeticStagesSpec({
      baseUrl: emulator.url,
      limit: 4,
      stages: `  - name: warmup
  - name: rl
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: ${grpo} }
`,
    }).spec;

  /** The failure a campaign (or the checks alone) ended with: the innermost application failure's type and message. */
  async function refusal(result: Promise<unknown>): Promise<{ type?: string; message: string }> {
    const err = await result.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkflowFailedError);
    let cause: Error | undefined = (err as WorkflowFailedError).cause;
    while (cause?.cause instanceof Error) cause = cause.cause;
    expect(cause).toBeInstanceOf(ApplicationFailure);
    return { type: (cause as ApplicationFailure).type ?? undefined, message: cause!.message };
  }

  test('stage 2 naming a missing Python function, a wrong environment argument, an unpolled task queue, or a worker variable the worker lacks: refused, nothing provisioned', async () => {
    const taskQueue = uniqueTaskQueue('preflight-stages');
    const pythonQueue = `${taskQueue}-py`;
    python = await startPythonWorker({
      address: temporal.settings.address!,
      taskQueue: pythonQueue,
      sources: [TEST_FUNCTIONS, CHECKED_GAME],
    });
    const environment = (args: string) =>
      `{ environment: { kind: verifiers, name: vf_checked_game, taskQueue: ${pythonQueue}, args: ${args} } }`;
    const missingHook = `RH_PREFLIGHT_HOOK_${process.pid}`;
    const missingSecret = `RH_PREFLIGHT_SECRET_${process.pid}`;
    // A webhook on loopback: a refused campaign tells it campaign.failed with the reason.
    const told: { event: string; body: string }[] = [];
    const hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        told.push({ event: String(req.headers['x-roundhouse-event']), body });
        res.end();
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const missingFunction = twoStages(`{ reward: { kind: python, name: no_such_reward, taskQueue: ${pythonQueue} } }`);
    missingFunction.notify = {
      webhook: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`,
      events: ['campaign.failed'],
      format: 'json',
      capacityWaitMinutes: 30,
    };
    const withNotify = twoStages(`{ reward: { kind: numeric } }`);
    withNotify.notify = {
      webhookEnv: missingHook,
      secretEnv: missingSecret,
      events: ['campaign.failed'],
      format: 'json',
      capacityWaitMinutes: 30,
    };
    const cases: [string, CampaignSpec, string, RegExp][] = [
      [
        'missing-function',
        missingFunction,
        'InvalidInput',
        /^stage 2 \(rl\): round\.grpo\.reward\.name: no reward named 'no_such_reward' is registered \(registered: .*digits_reward/,
      ],
      [
        'wrong-arg',
        twoStages(environment('{ turnz: 2 }')),
        'InvalidInput',
        /^stage 2 \(rl\): round\.grpo\.environment\.args: load_environment\(\*\*\{"turnz": 2\}\) failed: .*unexpected keyword argument 'turnz'/,
      ],
      [
        'arg-out-of-range',
        twoStages(environment('{ turns: 9 }')),
        'InvalidInput',
        /^stage 2 \(rl\): round\.grpo\.environment\.args: .*turns must be between 1 and 5, not 9/,
      ],
      [
        'unpolled-queue',
        twoStages(`{ reward: { kind: python, name: digits_reward, taskQueue: ${taskQueue}-nobody, workerWaitSeconds: 2 } }`),
        'PythonWorkerUnavailable',
        /^stage 2 \(rl\): round\.grpo\.reward: no Python worker polled task queue '.*-nobody' within 2 s/,
      ],
      [
        'worker-variables',
        withNotify,
        'WorkerEnvironmentMissing',
        new RegExp(`^notify\\.webhookEnv: ${missingHook} is not set on the worker .*; notify\\.secretEnv: ${missingSecret} is not set`),
      ],
    ];
    const worker = await createRoundhouseWorker({
      connection: temporal.nativeConnection,
      namespace: temporal.settings.namespace,
      taskQueue,
      workflowBundle: bundle,
      providers,
    });
    const reportRoot = testReportDir(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-preflight-c-')));
    // The hook closes on every path (an open server would keep jest from exiting).
    const refusedEach = worker.runUntil(async () => {
      for (const [name, spec, type, message] of cases) {
        const started = Date.now();
        const campaignId = `preflight-${name}-${taskQueue}`;
        const input: CampaignInput = { campaignId, spec, reportRoot };
        const handle: WorkflowHandle<typeof campaignWorkflow> = await temporal.client.workflow.start(campaignWorkflow, {
          taskQueue,
          workflowId: campaignId,
          args: [input],
        });
        expect({ name, ...(await refusal(handle.result())) }).toEqual({ name, type, message: expect.stringMatching(message) });
        // Not even stage 1's first round started.
        await expect(temporal.client.workflow.getHandle(`${campaignId}-round-1`).describe()).rejects.toThrow(/not found/i);
        // `roundhouse run` asks the same before it starts anything: the checks alone refuse the spec the same way.
        const checks = temporal.client.workflow.execute(campaignChecksWorkflow, {
          taskQueue,
          workflowId: `checks-${campaignId}`,
          args: [spec],
        });
        expect(await refusal(checks)).toEqual({ type, message: expect.stringMatching(message) });
        process.stderr.write(`[preflight] ${name}: refused twice (campaign, checks) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
      }
      // The campaign refused for its stage 2 function told its webhook so (the checks alone, run by the CLI, tell nobody).
      for (let i = 0; i < 200 && told.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      expect(told.map((t) => t.event)).toEqual(['campaign.failed']);
      expect(JSON.parse(told[0]!.body)).toMatchObject({
        type: 'campaign.failed',
        text: expect.stringMatching(
          /failed before its first round: stage 2 \(rl\): round\.grpo\.reward\.name: no reward named 'no_such_reward'/,
        ),
        data: { status: 'failed', errorType: 'InvalidInput', rounds: 0 },
      });
      // The same campaign with the arguments right and the variables set passes the checks.
      process.env[missingHook] = 'http://127.0.0.1:9/hook';
      process.env[missingSecret] = 'preflight-secret';
      try {
        for (const spec of [twoStages(environment('{ turns: 2 }')), withNotify])
          await temporal.client.workflow.execute(campaignChecksWorkflow, {
            taskQueue,
            workflowId: `checks-ok-${uniqueTaskQueue('c')}`,
            args: [spec],
          });
      } finally {
        delete process.env[missingHook];
        delete process.env[missingSecret];
      }
    });
    await refusedEach.finally(() => hook.close());
    // The emulator's ledger: no trainer was created, no GPU-second billed.
    const l = await ledger(emulator);
    expect(l.resources).toEqual([]);
    expect(l.resources.reduce((a, r) => a + r.gpuSeconds, 0)).toBe(0);
  });
});

import fs from 'node:fs';
import path from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { WorkflowHandle } from '@temporalio/client';
import { createRoundhouseWorker } from '../../workers/worker';
import { campaignProgressQuery, pauseCampaignUpdate, resumeCampaignUpdate, type CampaignInput } from '../../workflows/campaign/contract';
import { roundProgressQuery } from '../../workflows/round/contract';
import { campaignWorkflow, reaperWorkflow, roundWorkflow } from '../../workflows';
import { arithmeticStagesSpec, ticketCampaignSpec } from '../helpers/campaign';
import { arithmeticRoundInput, roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';
import { setFaults } from '../helpers/emulator';
import { startPythonWorker } from '../helpers/python-worker';
import { provisionGateWorkflowId } from '../../config/rules/provision-gate';
import { approvePromotionUpdate } from '../../workflows/campaign/promotion-contract';

/**
 * Records the histories that test/workflows/history-fixtures.test.ts replays: `npm run record-histories` (not part of
 * `npm test`). Each scenario runs on the current code and saves its history to test/fixtures/histories/<name>.json.
 */
const fixturesDir = path.resolve(__dirname, '../fixtures/histories');
const prefix = process.env.RECORD_HISTORIES_PREFIX ?? '';
const { env } = roundTestEnvironment({ provisioningDelayMs: 50 });

describe('recording', () => {
  const save = async (name: string, handle: WorkflowHandle) => {
    fs.mkdirSync(fixturesDir, { recursive: true });
    const history = await handle.fetchHistory();
    fs.writeFileSync(path.join(fixturesDir, `${prefix}${name}.json`), JSON.stringify(JSON.parse(historyToJSON(history)), null, 1));
  };
  /** Every run of a campaign (it continues-as-new after each round), oldest first, and its child rounds. */
  const saveCampaign = async (name: string, campaignId: string, rounds: number[]) => {
    const runs: { runId: string; startTime: Date }[] = [];
    for await (const w of env.temporal.client.workflow.list({ query: `WorkflowId = '${campaignId}'` })) runs.push(w);
    runs.sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
    for (const [i, run] of runs.entries())
      await save(`${name}-run-${i + 1}`, env.temporal.client.workflow.getHandle(campaignId, run.runId));
    for (const round of rounds)
      await save(`${name}-child-round-${round}`, env.temporal.client.workflow.getHandle(`${campaignId}-round-${round}`));
  };
  const withWorker = async <T>(taskQueue: string, body: () => Promise<T>): Promise<T> => {
    const worker = await createRoundhouseWorker({
      connection: env.temporal.nativeConnection,
      namespace: env.temporal.settings.namespace,
      taskQueue,
      workflowBundle: env.bundle,
      providers: env.providers,
    });
    return worker.runUntil(body());
  };
  const until = async (check: () => Promise<boolean>) => {
    for (let i = 0; i < 600 && !(await check()); i++) await new Promise((r) => setTimeout(r, 50));
  };

  test('an SFT round of three segments', async () => {
    const taskQueue = uniqueTaskQueue('rec-sft');
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-sft-${taskQueue}`, trainRows: 48, evalRows: 6 });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      expect((await handle.result()).status).toBe('completed');
      await save('round-sft', handle);
    });
  });

  test('an SFT round that rolls back from failed forward-backwards and a dead trainer, after waiting for capacity', async () => {
    const taskQueue = uniqueTaskQueue('rec-recover');
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-recover-${taskQueue}`, trainRows: 48, evalRows: 4 });
    input.spec.training = { ...input.spec.training, checkpointEvery: { steps: 3, keep: 3 } };
    await setFaults(env.emulator, {
      seed: 5,
      rules: [
        { kind: 'capacity-timeout', max: 1, durationMs: 1000 },
        { kind: 'capacity-queue', max: 1, durationMs: 2000, queuePosition: 2 },
        { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INTERNAL_ERROR', after: 2, max: 1 },
        { kind: 'resource-error', operation: 'optim-step', after: 6, max: 1 },
      ],
    });
    try {
      await withWorker(taskQueue, async () => {
        const handle = await env.temporal.client.workflow.start(roundWorkflow, {
          taskQueue,
          workflowId: `round-${taskQueue}`,
          args: [input],
        });
        const result = await handle.result();
        expect(result.status).toBe('completed');
        expect(result.recoveries?.length).toBeGreaterThanOrEqual(2);
        expect(result.capacityWaits?.length).toBe(1);
        await save('round-sft-recoveries-capacity', handle);
      });
    } finally {
      await setFaults(env.emulator, {});
    }
  });

  test('an SFT round that fails on bad data before provisioning', async () => {
    const taskQueue = uniqueTaskQueue('rec-bad');
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-bad-${taskQueue}`, trainRows: 16, evalRows: 4 });
    fs.appendFileSync(input.data.train, '{"prompt": "", "answer": "billing"}\n');
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      await expect(handle.result()).rejects.toThrow();
      await save('round-sft-invalid-input', handle);
    });
  });

  test('a GRPO round with a KL reference session and off-policy sampling', async () => {
    const taskQueue = uniqueTaskQueue('rec-grpo');
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `rec-grpo-${taskQueue}`,
      limit: 32,
      yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 2 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, maxStepsOffPolicy: 1, reference: start, loss: { type: grpo, beta: 0.05 } } }`,
    });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      expect((await handle.result()).status).toBe('completed');
      await save('round-grpo-reference', handle);
    });
  });

  test('a DPO round evaluating during training that stops early', async () => {
    const taskQueue = uniqueTaskQueue('rec-dpo-early');
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `rec-dpo-early-${taskQueue}`,
      tickets: true,
      evaluation: '{ scorer: exact, every: 4, earlyStop: { patience: 2 } }',
      yaml: `training: { epochs: 6, batchSize: 8, learningRate: 0.02, loraRank: 8, maxSeqLen: 128, segmentSteps: 50 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
    });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      const result = await handle.result();
      expect(result.status).toBe('completed');
      expect(result.earlyStop).toBeDefined();
      await save('round-dpo-early-stop', handle);
    });
  });

  test('a DPO round', async () => {
    const taskQueue = uniqueTaskQueue('rec-dpo');
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `rec-dpo-${taskQueue}`,
      tickets: true,
      yaml: `training: { epochs: 1, batchSize: 16, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 2 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
    });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      expect((await handle.result()).status).toBe('completed');
      await save('round-dpo', handle);
    });
  });

  test('a round stopped by its GPU-minute budget in the middle of a segment', async () => {
    const taskQueue = uniqueTaskQueue('rec-budget');
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-budget-${taskQueue}`, trainRows: 400, evalRows: 4 });
    input.spec.training.segmentSteps = 200;
    input.budget = { maxGpuMinutes: 0.02 };
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      expect((await handle.result()).status).toBe('stopped');
      await save('round-budget-stopped', handle);
    });
  });

  test('a round cancelled while training', async () => {
    const taskQueue = uniqueTaskQueue('rec-cancel');
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-cancel-${taskQueue}`, trainRows: 200, evalRows: 4 });
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(roundWorkflow, {
        taskQueue,
        workflowId: `round-${taskQueue}`,
        args: [input],
      });
      await until(async () => (await handle.query(roundProgressQuery)).step >= 3);
      await handle.cancel();
      await expect(handle.result()).rejects.toThrow();
      await save('round-cancelled', handle);
    });
  });

  test('a campaign of two rounds, one paused and resumed mid-segment (with its child rounds)', async () => {
    const taskQueue = uniqueTaskQueue('rec-campaign');
    const { spec, dir } = ticketCampaignSpec({ baseUrl: env.emulator.url, trainRows: 80, evalRows: 5, yaml: 'rounds: { max: 2 }' });
    spec.training.segmentSteps = 40;
    const campaignId = `rec-campaign-${taskQueue}`;
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
        taskQueue,
        workflowId: campaignId,
        args: [{ campaignId, spec, reportRoot: path.join(dir, 'c') } satisfies CampaignInput],
      });
      await until(async () => {
        const p = await handle.query(campaignProgressQuery);
        return p.currentRound?.phase === 'training' && p.currentRound.step >= 3;
      });
      await handle.executeUpdate(pauseCampaignUpdate);
      await until(async () => (await handle.query(campaignProgressQuery)).currentRound?.phase === 'paused');
      await handle.executeUpdate(resumeCampaignUpdate);
      expect((await handle.result()).status).toBe('completed');
      await saveCampaign('campaign', campaignId, [1, 2]);
    });
  });

  test('a staged campaign: SFT then GRPO (small)', async () => {
    const taskQueue = uniqueTaskQueue('rec-staged');
    const { spec, dir } = arithmeticStagesSpec({
      baseUrl: env.emulator.url,
      limit: 4,
      stages: `  - name: warmup
    gate: { metric: evalLoss, atMost: 1000 }
  - name: rl
    training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 2 }
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: importance_sampling } } }
`,
    });
    const campaignId = `rec-staged-${taskQueue}`;
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
        taskQueue,
        workflowId: campaignId,
        args: [{ campaignId, spec, reportRoot: path.join(dir, 'c') } satisfies CampaignInput],
      });
      const result = await handle.result();
      expect(result.status).toBe('completed');
      expect(result.stages?.map((s) => [s.name, s.gate?.passed])).toEqual([
        ['warmup', true],
        ['rl', undefined],
      ]);
      await saveCampaign(
        'staged-campaign',
        campaignId,
        result.rounds.map((r) => r.round),
      );
    });
  });

  test('a campaign of two GRPO rounds with a Python reward, scorer and data policy (with its child rounds and a Python call)', async () => {
    const taskQueue = uniqueTaskQueue('rec-python');
    const pythonQueue = `${taskQueue}-py`;
    const python = await startPythonWorker({ address: env.temporal.settings.address!, taskQueue: pythonQueue });
    try {
      const { spec, dir } = arithmeticStagesSpec({
        baseUrl: env.emulator.url,
        limit: 4,
        stages: `  - name: rl
    training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 2 }
    sampling: { maxTokens: 3, temperature: 1 }
    evaluation: { scorer: { kind: python, name: has_answer_digit, taskQueue: ${pythonQueue} } }
    rounds: { max: 2, nextData: { policy: python, name: every_other_row, taskQueue: ${pythonQueue} } }
    round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: python, name: digits_reward, taskQueue: ${pythonQueue} }, loss: { type: importance_sampling } } }
`,
      });
      const campaignId = `rec-python-${taskQueue}`;
      await withWorker(taskQueue, async () => {
        const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
          taskQueue,
          workflowId: campaignId,
          args: [{ campaignId, spec, reportRoot: path.join(dir, 'c') } satisfies CampaignInput],
        });
        const result = await handle.result();
        expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
        await saveCampaign(
          'python-campaign',
          campaignId,
          result.rounds.map((r) => r.round),
        );
        await save('python-call', env.temporal.client.workflow.getHandle(`python:${campaignId}/r1/s0/rewards`));
      });
    } finally {
      await python.stop();
    }
  });

  test('a campaign whose challenger waits for approval, is approved and notified', async () => {
    const taskQueue = uniqueTaskQueue('rec-promotion');
    const { spec, dir } = ticketCampaignSpec({
      baseUrl: env.emulator.url,
      trainRows: 30,
      evalRows: 5,
      yaml: `rounds: { max: 1 }
promotion: { line: rec-${taskQueue}, on: eval, approval: manual, approvalTimeout: 1h }
notify: { webhook: "http://127.0.0.1:9/hook", events: [promotion.pending, promotion.promoted, campaign.completed] }`,
    });
    const campaignId = `rec-promotion-${taskQueue}`;
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
        taskQueue,
        workflowId: campaignId,
        args: [{ campaignId, spec, reportRoot: path.join(dir, 'campaigns') } satisfies CampaignInput],
      });
      await until(async () => (await handle.query(campaignProgressQuery)).promotion?.status === 'pending-approval');
      await handle.executeUpdate(approvePromotionUpdate, { args: [{ by: 'recorder' }] });
      expect((await handle.result()).promotion?.status).toBe('promoted');
      await saveCampaign('campaign-promotion', campaignId, [1]);
      // The notifications (to a port nothing listens on) keep retrying on their own: end them.
      for await (const w of env.temporal.client.workflow.list({ query: `WorkflowType = 'notifyWorkflow' AND ExecutionStatus = 'Running'` }))
        if (w.workflowId.startsWith(`notify:${campaignId}/`))
          await env.temporal.client.workflow.getHandle(w.workflowId).terminate('recorded');
    });
  });

  test('two campaigns on one line approved together: the second judged again; a promotion that throws, told failed; a staged promotion', async () => {
    const taskQueue = uniqueTaskQueue('rec-line');
    const line = `rec-line-${taskQueue}`;
    const campaign = (label: string, promotion: string) => {
      const { spec, dir } = ticketCampaignSpec({
        baseUrl: env.emulator.url,
        trainRows: 30,
        evalRows: 5,
        yaml: `rounds: { max: 1 }\npromotion: ${promotion}\nnotify: { webhook: "http://127.0.0.1:9/hook", events: [campaign.failed] }`,
      });
      return { campaignId: `rec-${label}-${taskQueue}`, spec, reportRoot: path.join(dir, 'campaigns') } satisfies CampaignInput;
    };
    const first = campaign('line-a', `{ line: ${line}, on: eval, approval: manual, approvalTimeout: 1h }`);
    const second = {
      ...campaign('line-b', `{ line: ${line}, on: eval, approval: manual, approvalTimeout: 1h }`),
      reportRoot: first.reportRoot,
    };
    const failing = campaign('line-fail', `{ line: ${line}-fail, on: eval }`);
    const corrupt = path.join(path.dirname(failing.reportRoot), 'lines', `${line}-fail`, 'champions', '000001.json');
    fs.mkdirSync(path.dirname(corrupt), { recursive: true });
    fs.writeFileSync(corrupt, '{ "line": ');
    const { spec: staged } = arithmeticStagesSpec({ baseUrl: env.emulator.url, stages: '  - name: a\n  - name: b\n' });
    staged.promotion = { line: `${line}-staged`, metric: 'accuracy', minGain: 0, approval: 'auto', approvalTimeout: 3_600_000 };
    const stagedInput = { campaignId: `rec-line-staged-${taskQueue}`, spec: staged, reportRoot: first.reportRoot } satisfies CampaignInput;
    await withWorker(taskQueue, async () => {
      const start = (input: CampaignInput) =>
        env.temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] });
      const [a, b, failed, stagedRun] = await Promise.all([start(first), start(second), start(failing), start(stagedInput)]);
      for (const handle of [a, b])
        await until(async () => (await handle.query(campaignProgressQuery)).promotion?.status === 'pending-approval');
      await a.executeUpdate(approvePromotionUpdate, { args: [{ by: 'recorder' }] });
      await a.result();
      await b.executeUpdate(approvePromotionUpdate, { args: [{ by: 'recorder' }] });
      expect((await b.result()).promotion?.reason).toMatch(/judged again/);
      await expect(failed.result()).rejects.toThrow();
      expect((await stagedRun.result()).promotion?.decision?.challenger.round).toBe(2);
      await saveCampaign('campaign-promotion-rejudged', second.campaignId, [1]);
      await saveCampaign('campaign-promotion-failed', failing.campaignId, [1]);
      await saveCampaign('staged-campaign-promotion', stagedInput.campaignId, [1, 2]);
      for await (const w of env.temporal.client.workflow.list({ query: `WorkflowType = 'notifyWorkflow' AND ExecutionStatus = 'Running'` }))
        if (w.workflowId.includes(taskQueue)) await env.temporal.client.workflow.getHandle(w.workflowId).terminate('recorded');
    });
  }, 600_000);

  test('a reaper pass', async () => {
    const taskQueue = uniqueTaskQueue('rec-reaper');
    await withWorker(taskQueue, async () => {
      const handle = await env.temporal.client.workflow.start(reaperWorkflow, {
        taskQueue,
        workflowId: `reaper-${taskQueue}`,
        args: [{ providers: [{ kind: 'local', baseUrl: env.emulator.url, model: 'roundhouse/tiny-chat' }], graceSeconds: 300 }],
      });
      await handle.result();
      await save('reaper-pass', handle);
    });
  });
  test('a provision gate that three rounds provisioning at once took turns on', async () => {
    const taskQueue = uniqueTaskQueue('rec-gate');
    const inputs = [0, 1, 2].map((i) => {
      const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `rec-gate-${taskQueue}-${i}`, trainRows: 8, evalRows: 2 });
      input.spec.training.epochs = 1;
      return input;
    });
    const provider = await env.providers.providerFor(inputs[0]!.spec.provider);
    const gateId = provisionGateWorkflowId({
      taskQueue,
      provider: provider.kind,
      account: provider.account,
      model: inputs[0]!.spec.provider.model,
    });
    await withWorker(taskQueue, async () => {
      const results = await Promise.all(
        inputs.map((input) =>
          env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
        ),
      );
      expect(results.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
      await save('provision-gate', env.temporal.client.workflow.getHandle(gateId));
    });
  });
});

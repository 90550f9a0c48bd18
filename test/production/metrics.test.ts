import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round/contract';
import { ownerTagFor } from '../../config/rules/owner-tag';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import { setFaults, startTestEmulator, togetherProvider } from '../helpers/emulator';
import { freePort } from '../helpers/ports';
import { arithmeticRoundInput, ticketRoundInput } from '../helpers/round';
import { connectTestTemporal, uniqueTaskQueue } from '../helpers/temporal';
import { bundleToFile, startWorkerProcess } from '../helpers/worker-process';
import { progressOf, scrape, total, waitFor } from './helpers';
import { reaperWorkflow, roundWorkflow } from '../../workflows';

test('the metrics endpoint serves Temporal worker metrics and Roundhouse metrics, scraped during and after a round', async () => {
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator({ provisioningDelayMs: 200, operationLatencyMs: 60 });
  // One training checkpoint request fails past the HTTP retry budget: a retryable provider error at the boundary.
  await setFaults(emulator, {
    rules: [{ kind: 'http-503', method: 'POST', path: '/operations/training-checkpoint$', rate: 1, max: 6, retryAfterMs: 5 }],
  });
  const taskQueue = uniqueTaskQueue('metrics');
  const address = `127.0.0.1:${await freePort()}`;
  const worker = startWorkerProcess({
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_WORKFLOW_BUNDLE: await bundleToFile(),
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-metrics-')),
    ROUNDHOUSE_METRICS_ADDRESS: address,
  });
  try {
    await worker.ready;
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `metrics-${taskQueue}`, trainRows: 48, evalRows: 8 });
    const handle = await temporal.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });

    // During training
    await waitFor('training past step 3', async () => {
      const p = await progressOf(handle);
      return p?.phase === 'training' && p.step >= 3;
    });
    const during = await scrape(address);
    const steps = total(during, 'roundhouse_optimizer_steps', 'provider="local"');
    expect(steps).toBeGreaterThanOrEqual(3);
    expect(steps).toBeLessThan(12);
    const loss = during.get('roundhouse_latest_loss')?.find((s) => s.labels.includes('campaign_name="tickets-test"'))?.value;
    expect(loss).toBeGreaterThan(0);
    expect(Number.isFinite(loss)).toBe(true);
    expect(total(during, 'roundhouse_resources_provisioned')).toBe(1);
    const temporalMetrics = [...during.keys()].filter((name) => name.startsWith('temporal_'));
    expect(temporalMetrics).toEqual(
      expect.arrayContaining(['temporal_worker_task_slots_available', 'temporal_activity_execution_latency_count']),
    );

    // After the round
    const result: RoundResult = await handle.result();
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 12 });
    const after = await scrape(address);
    expect(total(after, 'roundhouse_optimizer_steps')).toBe(12);
    expect(total(after, 'roundhouse_resources_released')).toBeGreaterThanOrEqual(1);
    expect(total(after, 'roundhouse_round_gpu_minutes_count')).toBe(1);
    expect(total(after, 'roundhouse_round_gpu_minutes_sum')).toBeCloseTo(result.gpuMinutes, 6);
    expect(total(after, 'roundhouse_provider_errors', 'class="retryable"')).toBeGreaterThanOrEqual(1);

    // The reaper deactivates an orphan (untagged: Together tags a resource only through its sessions; the explicit rule
    // with no grace): counted as reaped.
    const orphanMaker = togetherProvider(emulator, LOCAL_EMULATOR_KEY);
    const orphan = await orphanMaker.provision({
      model: 'roundhouse/tiny-chat',
      ownerTag: ownerTagFor(`gone-${taskQueue}`),
      generatorReplicas: 1,
      inactiveTimeoutSeconds: 600,
    });
    await orphanMaker.close();
    const reaped = await temporal.client.workflow.execute(reaperWorkflow, {
      taskQueue,
      workflowId: `reaper-${taskQueue}`,
      args: [{ providers: [{ kind: 'local', baseUrl: emulator.url, model: '' }], graceSeconds: 0, untaggedGraceMinutes: 0 }],
    });
    expect((reaped as { reaped: { resourceId: string }[] }).reaped.map((r) => r.resourceId)).toContain(orphan.id);
    const final = await scrape(address);
    expect(total(final, 'roundhouse_resources_reaped', 'provider="local"')).toBe(1);
    // Policy-gradient and preference rounds count their steps too.
    const dpo = arithmeticRoundInput({
      baseUrl: emulator.url,
      campaignId: `metrics-dpo-${taskQueue}`,
      tickets: true,
      yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }\nsampling: { maxTokens: 3 }\nround: { kind: dpo }`,
    });
    const dpoResult: RoundResult = await temporal.client.workflow.execute(roundWorkflow, {
      taskQueue,
      workflowId: `round-dpo-${taskQueue}`,
      args: [dpo],
    });
    expect(dpoResult).toMatchObject({ status: 'completed', stepsApplied: 8 });
    expect(total(await scrape(address), 'roundhouse_optimizer_steps')).toBe(12 + 8);
    process.stderr.write(
      `[metrics] during the round: ${steps} steps, latest loss ${loss?.toFixed(3)}, ${temporalMetrics.length} temporal_* series; after: ` +
        `${total(after, 'roundhouse_round_gpu_minutes_sum').toFixed(4)} GPU-minutes, ${total(after, 'roundhouse_provider_errors')} provider errors\n`,
    );
  } finally {
    await worker.stop();
    await emulator.close();
    await temporal.close();
  }
}, 120_000);

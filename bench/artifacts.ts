import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { joinLocation, putContentAddressed } from '../config/io/artifacts';
import type { RoundInput, RoundResult } from '../workflows/round/contract';
import { arithmeticRoundInput } from '../test/helpers/round';
import { startS3Server } from '../test/helpers/s3-server';
import { benchRoundInput, note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';
import { roundWorkflow } from '../workflows';

/** A loopback HTTP proxy in front of the S3 server that records when the store makes each request. */
async function countingProxy(
  target: string,
): Promise<{ url: string; requests: (fromMs?: number, toMs?: number) => number; close(): Promise<void> }> {
  const upstream = new URL(target);
  const times: number[] = [];
  const server = http.createServer((req, res) => {
    times.push(Date.now());
    const forward = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on('error', () => res.destroy());
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: (fromMs = 0, toMs = Infinity) => times.filter((t) => t >= fromMs && t <= toMs).length,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * What the artifact store costs per step: the same rounds with their artifacts on the local disk and on S3 (moto's
 * server, a separate process on loopback, behind a counting proxy). An SFT round's store traffic is fixed per round
 * and per segment (step records are flushed once per segment), so its requests during training must be ~0 per step;
 * a GRPO round writes each step's samples (a retried step must reuse them), one object per step by design.
 */
export async function artifactsBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const s3 = await startS3Server();
  const proxy = await countingProxy(s3.endpoint);
  // The worker in this process reaches the store through the proxy (its S3 client is made on first use).
  Object.assign(process.env, s3.env, { AWS_ENDPOINT_URL_S3: proxy.url });
  const bucket = await s3.bucket(`bench-artifacts-${Date.now()}`);
  const emulator = await startBenchEmulator({ operationLatencyMs: 50 });
  const run = async (input: RoundInput, label: string) => {
    const taskQueue = `bench-artifacts-${label}-${Date.now()}`;
    const workflowId = `round-${taskQueue}`;
    const started = Date.now();
    const result: RoundResult = await withWorker(ctx, taskQueue, () =>
      ctx.client.workflow.execute(roundWorkflow, { taskQueue, workflowId, args: [input] }),
    );
    if (result.status !== 'completed' || result.stepsApplied !== result.totalSteps)
      throw new Error(`${label}: the round ended ${result.status} with ${result.stepsApplied}/${result.totalSteps} steps`);
    const phase = trainingPhase(await ctx.client.workflow.getHandle(workflowId).fetchHistory());
    const requests = proxy.requests(started);
    // The training phase's own traffic (the dev server's clock is this machine's).
    const training = proxy.requests(phase.startMs, phase.endMs);
    note(
      `artifacts ${label}: ${result.totalSteps} steps, training ${phase.ms} ms (${phase.segments} segment(s)); store requests: ${requests} in the round, ${training} in training`,
    );
    return { steps: result.totalSteps, msPerStep: phase.ms / result.totalSteps, requests, training };
  };
  const inS3 = async (input: RoundInput, label: string): Promise<RoundInput> => {
    const upload = async (file: string) => (await putContentAddressed(bucket, 'data', fs.readFileSync(file), '.jsonl')).location;
    return {
      ...input,
      data: { train: await upload(input.data.train), eval: await upload(input.data.eval) },
      reportDir: joinLocation(bucket, 'campaigns', label),
    };
  };
  try {
    // SFT with the spec's default segments (up to 100 steps or 120 s), on the disk and on S3.
    const steps = ctx.quick ? 8 : 60;
    const sft = (label: string) =>
      benchRoundInput({ baseUrl: emulator.url, campaignId: `artifacts-${label}`, steps, stepsPerEpoch: Math.min(steps, 10) });
    const file = await run(sft('sft-file'), 'sft-file');
    const onS3 = await run(await inS3(sft('sft-s3'), 'sft-s3'), 'sft-s3');
    const ratio = onS3.msPerStep / file.msPerStep;
    const perStep = onS3.training / steps;
    report({ name: 'artifacts.sft.file_ms_per_step', value: file.msPerStep, target: 'info' });
    report({ name: 'artifacts.sft.s3_ms_per_step', value: onS3.msPerStep, target: 'info' });
    report({ name: 'artifacts.sft.s3_over_file', value: ratio, target: '≤ 1.05', met: ratio <= 1.05 });
    report({ name: 'artifacts.sft.store_requests_per_round', value: onS3.requests, target: `info; ${steps} steps` });
    report({
      name: 'artifacts.sft.training_store_requests_per_step',
      value: perStep,
      target: '≤ 0.05: off the per-step path',
      met: perStep <= 0.05,
    });

    // GRPO: one samples object per step, by design (a retried step reuses its samples).
    const grpo = (label: string) =>
      arithmeticRoundInput({
        baseUrl: emulator.url,
        campaignId: `artifacts-${label}`,
        limit: ctx.quick ? 5 : 10,
        yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric } } }`,
      });
    const gFile = await run(grpo('grpo-file'), 'grpo-file');
    const gS3 = await run(await inS3(grpo('grpo-s3'), 'grpo-s3'), 'grpo-s3');
    report({ name: 'artifacts.grpo.training_store_requests_per_step', value: gS3.training / gS3.steps, target: 'info' });
    report({ name: 'artifacts.grpo.s3_over_file', value: gS3.msPerStep / gFile.msPerStep, target: 'info' });
  } finally {
    await emulator.close();
    await proxy.close();
    await s3.close();
  }
}

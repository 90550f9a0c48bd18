import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { temporal } from '@temporalio/proto';
import { parseCampaignSpec } from '../config/io/spec';
import { writeTicketData, writeTicketTestSet } from '../examples/support-tickets/generate';
import type { CampaignInput, CampaignResult } from '../workflows/campaign/contract';
import { campaignWorkflow } from '../workflows';
import { note, startBenchEmulator, withWorker, type BenchContext, type Report } from './harness';

type History = temporal.api.history.v1.IHistory;

type Variant = 'plain' | 'promoted' | 'rescored';

/**
 * What closing the loop costs at a campaign's end: the same one-round ticket campaign (emulator, 1 s operations)
 * plain, with `promotion` (auto, on a held-out test set, a fresh line: the first result becomes champion) and
 * `notify` (campaign.completed, promotion.promoted to a receiver on loopback), and challenging a champion whose
 * figures are for another test set (re-scored by an evaluation-only round first). Measured in the campaign's last
 * run (after its round: the decision, the records, the summary) from the server's history: its events and how long
 * it ran; and when each notification reached the receiver after the campaign closed.
 */
export async function promotionBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const latencyMs = ctx.quick ? 100 : 1000;
  const emulator = await startBenchEmulator({ operationLatencyMs: latencyMs, provisioningDelayMs: 50 });
  const arrivals = new Map<string, number>();
  const receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const key = String(req.headers['idempotency-key']);
      if (!arrivals.has(key)) arrivals.set(key, Date.now());
      res.end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const dir = fs.mkdtempSync(path.join(ctx.scratch, 'promotion-'));
  writeTicketData(dir, 10, 10); // one step of 10 rows: the training is not what is measured
  writeTicketTestSet(dir, 'test-a.jsonl', 12, 23);
  writeTicketTestSet(dir, 'test-b.jsonl', 12, 29);
  const taskQueue = `bench-promotion-${Date.now()}`;
  const reportRoot = path.join(dir, 'campaigns');
  const input = (variant: Variant, i: number): CampaignInput => {
    const line = `bench-line-${taskQueue}-${i}`;
    const closing =
      variant === 'plain'
        ? ''
        : `promotion: { line: ${variant === 'rescored' ? `bench-line-${taskQueue}-${i - 1}` : line}, on: test }
notify: { webhook: "${hook}", events: [campaign.completed, promotion.promoted, promotion.kept] }`;
    const text = `
name: bench-promotion
provider: { kind: local, baseUrl: "${emulator.url}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl, test: ${variant === 'rescored' ? 'test-b.jsonl' : 'test-a.jsonl'} }
training: { epochs: 1, batchSize: 10, learningRate: 0.005, loraRank: 8, maxSeqLen: 256 }
sampling: { maxTokens: 4, temperature: 0 }
evaluation: { scorer: exact }
rounds: { max: 1 }
${closing}
`;
    const file = path.join(dir, `campaign-${variant}-${i}.yaml`);
    fs.writeFileSync(file, text);
    return { campaignId: `bench-promotion-${variant}-${i}-${taskQueue}`, spec: parseCampaignSpec(text, file), reportRoot };
  };
  // The rescored variant challenges the champion the promoted run before it made (on test-a) with test-b.
  // Once each: the figures are event counts, the close's 100–200 ms and the re-scoring round's 10 s, not drift-sized
  // ratios (six campaigns, the pair twice and plain first and last, took 137 s on 2026-12-07).
  const order: Variant[] = ['plain', 'promoted', 'rescored'];
  try {
    const runs = await withWorker(ctx, taskQueue, async () => {
      const done: { variant: Variant; events: number; ms: number; notifiedMs: number[] }[] = [];
      for (const [i, variant] of order.entries()) {
        const campaign = input(variant, i);
        const result: CampaignResult = await ctx.client.workflow.execute(campaignWorkflow, {
          taskQueue,
          workflowId: campaign.campaignId!,
          args: [campaign],
        });
        if (result.status !== 'completed') throw new Error(`the ${variant} campaign ended ${result.status}`);
        if (variant !== 'plain' && !['promoted', 'kept'].includes(result.promotion?.status ?? ''))
          throw new Error(`the ${variant} campaign's promotion ended ${result.promotion?.status}: ${result.promotion?.reason}`);
        if (variant === 'rescored' && !result.promotion?.decision?.champion?.rescored)
          throw new Error('the rescored campaign compared without re-scoring the champion');
        const last = await ctx.client.workflow.getHandle(campaign.campaignId!).fetchHistory();
        const span = runSpan(last);
        const keys =
          variant === 'plain'
            ? []
            : [`${campaign.campaignId}/campaign.completed`, `${campaign.campaignId}/promotion.${result.promotion!.status}`];
        const deadline = Date.now() + 30_000;
        while (keys.some((k) => !arrivals.has(k)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        // campaign.completed is sent as the campaign closes (the promotion's own event, before it).
        const notifiedMs = keys.filter((k) => k.endsWith('/campaign.completed')).map((k) => (arrivals.get(k) ?? NaN) - span.closedMs);
        note(
          `promotion ${variant}: last run ${span.events} events, ${span.ms} ms${notifiedMs.length ? `; notified ${notifiedMs.map((m) => `${m} ms`).join(', ')} after the close` : ''}`,
        );
        done.push({ variant, events: span.events, ms: span.ms, notifiedMs });
      }
      return done;
    });
    const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);
    const of = (v: Variant) => runs.filter((r) => r.variant === v);
    const [plain, promoted, rescored] = [of('plain'), of('promoted'), of('rescored')];
    report({ name: 'promotion.last_run_events.plain', value: mean(plain.map((r) => r.events)), target: 'info' });
    report({
      name: 'promotion.events_added',
      value: mean(promoted.map((r) => r.events)) - mean(plain.map((r) => r.events)),
      target: 'info; judge, record, registry, 2 notifications started',
    });
    report({
      name: 'promotion.ms_added',
      value: mean(promoted.map((r) => r.ms)) - mean(plain.map((r) => r.ms)),
      target: 'info; the decision at the end of a campaign',
    });
    report({
      name: 'promotion.rescore_ms_added',
      value: mean(rescored.map((r) => r.ms)) - mean(plain.map((r) => r.ms)),
      target: `info; an evaluation-only round of the champion at ${latencyMs} ms operations`,
    });
    report({
      name: 'promotion.rescore_events_added',
      value: mean(rescored.map((r) => r.events)) - mean(plain.map((r) => r.events)),
      target: 'info; the re-scoring is a child round: its own events are in its history',
    });
    report({
      name: 'notify.completed_delivered_ms_after_close',
      value: mean([...promoted, ...rescored].flatMap((r) => r.notifiedMs)),
      target: 'info; campaign.completed at a receiver on loopback, first attempt',
    });
  } finally {
    receiver.close();
    await emulator.close();
  }
}

/** The last run of a campaign: its events, how long it ran, and when it closed. */
function runSpan(history: History): { events: number; ms: number; closedMs: number } {
  const events = history.events ?? [];
  const at = (e: (typeof events)[number]) => Number(e.eventTime!.seconds ?? 0) * 1000 + Math.floor((e.eventTime!.nanos ?? 0) / 1e6);
  return { events: events.length, ms: at(events.at(-1)!) - at(events[0]!), closedMs: at(events.at(-1)!) };
}

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LOCAL_EMULATOR_KEY, ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { startTestEmulator, togetherProvider } from '../helpers/emulator';
import { ticketCampaignSpec } from '../helpers/campaign';
import { parseCampaignSpec } from '../../config/io/spec';
import { writeArithmeticData } from '../../examples/arithmetic/generate';
import { writeTicketPreferences } from '../../examples/support-tickets/generate';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue } from '../helpers/temporal';
import { campaignWorkflow } from '../../workflows';

const CHROMIUM = '/usr/bin/chromium';

test('a campaign writes report.html and summary.md; the HTML renders its charts in headless Chromium without console errors', async () => {
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator();
  const providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-report-')) });
  try {
    const taskQueue = uniqueTaskQueue('report');
    const { spec, dir } = ticketCampaignSpec({
      baseUrl: emulator.url,
      trainRows: 30,
      evalRows: 10,
      yaml: 'rounds: { max: 2, nextData: { policy: all } }',
    });
    const campaignId = `report-${taskQueue}`;
    const worker = await createRoundhouseWorker({
      connection: temporal.nativeConnection,
      namespace: 'default',
      taskQueue,
      workflowBundle: await bundleWorkflows(),
      providers,
    });
    const result: CampaignResult = await worker.runUntil(
      temporal.client.workflow.execute(campaignWorkflow, {
        taskQueue,
        workflowId: campaignId,
        args: [{ campaignId, spec, reportRoot: dir } satisfies CampaignInput],
      }),
    );
    const campaignDir = path.dirname(result.summaryPath);
    const html = fs.readFileSync(path.join(campaignDir, 'report.html'), 'utf8');
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href=["']https?:/); // self-contained: nothing fetched
    expect(html).toContain(`/namespaces/default/workflows/${campaignId}-round-2`);
    expect(html).toMatch(/Round 1 → 2: \d+ fixed, \d+ regressed/);
    const md = fs.readFileSync(path.join(campaignDir, 'summary.md'), 'utf8');
    expect(md).toContain('| round | status | accuracy |');
    expect(md.split('\n').filter((l) => /^\| [12] \| completed/.test(l))).toHaveLength(2);

    const screenshot = path.join(campaignDir, 'report.png');
    const flags = [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${fs.mkdtempSync(path.join(os.tmpdir(), 'rh-chrome-'))}`,
      '--enable-logging=stderr',
      '--v=0',
    ];
    const dom = spawnSync(
      CHROMIUM,
      [...flags, '--virtual-time-budget=3000', '--dump-dom', `file://${path.join(campaignDir, 'report.html')}`],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(dom.status).toBe(0);
    expect(dom.stdout).toMatch(/<body[^>]*data-rendered="3"/); // all three charts were built
    expect(dom.stderr).not.toMatch(/Uncaught|CONSOLE\(\d+\)\] "?Error/);
    const shot = spawnSync(
      CHROMIUM,
      [...flags, '--window-size=1200,1700', `--screenshot=${screenshot}`, `file://${path.join(campaignDir, 'report.html')}`],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(shot.status).toBe(0);
    expect(fs.statSync(screenshot).size).toBeGreaterThan(20_000);
    process.stderr.write(`[report] ${path.join(campaignDir, 'report.html')} → ${screenshot}\n`);
  } finally {
    await providers.close();
    await emulator.close();
    await temporal.close();
  }
});

function renderedCharts(htmlFile: string): { charts: number; stderr: string } {
  const flags = [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    `--user-data-dir=${fs.mkdtempSync(path.join(os.tmpdir(), 'rh-chrome-'))}`,
    '--enable-logging=stderr',
    '--v=0',
  ];
  const dom = spawnSync(CHROMIUM, [...flags, '--virtual-time-budget=3000', '--dump-dom', `file://${htmlFile}`], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(dom.status).toBe(0);
  return { charts: Number(/<body[^>]*data-rendered="(\d+)"/.exec(dom.stdout)?.[1] ?? -1), stderr: dom.stderr };
}

const KIND_CAMPAIGNS = {
  grpo: {
    write: (dir: string) => writeArithmeticData(dir),
    yaml: `data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 16, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 5 }
sampling: { maxTokens: 3, temperature: 1 }
evaluation: { scorer: numeric }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric } } }
rounds: { max: 2, nextData: { policy: mistakes }, startFrom: { checkpointId: CHECKPOINT } }`,
    summary: /round 1 \(grpo\): mean reward [\d.]+ at its first step → [\d.]+ at its last/,
  },
  dpo: {
    write: (dir: string) => writeTicketPreferences(dir, 40, 10),
    yaml: `data: { train: pairs.train.jsonl, eval: pairs.eval.jsonl }
training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 128, segmentSteps: 5 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }
rounds: { max: 2, nextData: { policy: static } }`,
    summary: /round 2 \(dpo\): eval preference margin -?[\d.]+ → -?[\d.]+ nats, preference accuracy [\d.]+%/,
  },
};

test.each(['grpo', 'dpo'] as const)(
  'a %s campaign of two rounds reports its per-step policy curve, rendered in Chromium',
  async (kind) => {
    const temporal = await connectTestTemporal();
    const emulator = await startTestEmulator();
    const providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-report-')) });
    try {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `rh-${kind}-campaign-`));
      KIND_CAMPAIGNS[kind].write(dir);
      // A warm start: the campaign's first round opens from a training checkpoint made beforehand.
      const provider = togetherProvider(emulator, LOCAL_EMULATOR_KEY); // the account the worker uses on a local provider
      const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'warm-start' });
      await provider.waitReady(resource.id, { pollIntervalMs: 20 });
      const session = await provider.openSession({ resourceId: resource.id, loraRank: 8 });
      const checkpoint = await provider.awaitOperation(await provider.submitTrainingCheckpoint(session.id, 'warm-start'));
      await provider.deactivate(resource.id);
      await provider.close();
      const text = `name: ${kind}-campaign\nprovider: { kind: local, baseUrl: "${emulator.url}", model: roundhouse/tiny-chat }\nadvanced: { heartbeatTimeoutSeconds: 5 }\n${KIND_CAMPAIGNS[kind].yaml.replace('CHECKPOINT', checkpoint.checkpointId)}\n`;
      fs.writeFileSync(path.join(dir, 'campaign.yaml'), text);
      const spec = parseCampaignSpec(text, path.join(dir, 'campaign.yaml'));
      const taskQueue = uniqueTaskQueue(`report-${kind}`);
      const campaignId = `report-${taskQueue}`;
      const worker = await createRoundhouseWorker({
        connection: temporal.nativeConnection,
        namespace: 'default',
        taskQueue,
        workflowBundle: await bundleWorkflows(),
        providers,
      });
      const result: CampaignResult = await worker.runUntil(
        temporal.client.workflow.execute(campaignWorkflow, {
          taskQueue,
          workflowId: campaignId,
          args: [{ campaignId, spec, reportRoot: dir } satisfies CampaignInput],
        }),
      );
      expect(result.rounds.map((r) => [r.round, r.status])).toEqual([
        [1, 'completed'],
        [2, 'completed'],
      ]);
      const campaignDir = path.dirname(result.summaryPath);
      const md = fs.readFileSync(path.join(campaignDir, 'summary.md'), 'utf8');
      expect(md).toMatch(KIND_CAMPAIGNS[kind].summary);
      const html = fs.readFileSync(path.join(campaignDir, 'report.html'), 'utf8');
      const data = JSON.parse(/<script id="report-data" type="application\/json">(.*?)<\/script>/s.exec(html)![1]!);
      const series = kind === 'grpo' ? data.rewards : data.margins;
      expect(series.map((s: { round: number }) => s.round)).toEqual([1, 2]);
      const round1 = JSON.parse(fs.readFileSync(result.rounds[0]!.reportPath, 'utf8'));
      if (kind === 'grpo') expect(round1.started_from_checkpoint).toBe(checkpoint.checkpointId);
      expect(series[0].points.map((p: { y: number }) => p.y)).toEqual(
        round1.steps.map((s: { meanReward?: number; margin?: number }) => (kind === 'grpo' ? s.meanReward : s.margin)),
      );
      const rendered = renderedCharts(path.join(campaignDir, 'report.html'));
      expect(rendered.charts).toBe(4); // metric, eval loss, step loss, and the kind's own curve
      expect(rendered.stderr).not.toMatch(/Uncaught|CONSOLE\(\d+\)\] "?Error/);
    } finally {
      await providers.close();
      await emulator.close();
      await temporal.close();
    }
  },
  180_000,
);

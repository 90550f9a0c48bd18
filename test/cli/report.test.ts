import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign-contract';
import { startTestEmulator } from '../helpers/emulator';
import { ticketCampaignSpec } from '../helpers/campaign';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue } from '../helpers/temporal';

const CHROMIUM = '/usr/bin/chromium';

test('a campaign writes report.html and summary.md; the HTML renders its charts in headless Chromium without console errors', async () => {
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator();
  const providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-report-')) });
  try {
    const taskQueue = uniqueTaskQueue('report');
    const { spec, dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 30, evalRows: 10, yaml: 'rounds: { max: 2, nextData: { policy: all } }' });
    const campaignId = `report-${taskQueue}`;
    const worker = await createRoundhouseWorker({ connection: temporal.nativeConnection, namespace: 'default', taskQueue, workflowBundle: await bundleWorkflows(), providers });
    const result: CampaignResult = await worker.runUntil(
      temporal.client.workflow.execute('campaignWorkflow', { taskQueue, workflowId: campaignId, args: [{ campaignId, spec, reportRoot: dir } satisfies CampaignInput] }),
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
    const flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', `--user-data-dir=${fs.mkdtempSync(path.join(os.tmpdir(), 'rh-chrome-'))}`, '--enable-logging=stderr', '--v=0'];
    const dom = spawnSync(CHROMIUM, [...flags, '--virtual-time-budget=3000', '--dump-dom', `file://${path.join(campaignDir, 'report.html')}`], { encoding: 'utf8', timeout: 60_000 });
    expect(dom.status).toBe(0);
    expect(dom.stdout).toMatch(/<body[^>]*data-rendered="3"/); // all three charts were built
    expect(dom.stderr).not.toMatch(/Uncaught|CONSOLE\(\d+\)\] "?Error/);
    const shot = spawnSync(CHROMIUM, [...flags, '--window-size=1200,1700', `--screenshot=${screenshot}`, `file://${path.join(campaignDir, 'report.html')}`], { encoding: 'utf8', timeout: 60_000 });
    expect(shot.status).toBe(0);
    expect(fs.statSync(screenshot).size).toBeGreaterThan(20_000);
    process.stderr.write(`[report] ${path.join(campaignDir, 'report.html')} → ${screenshot}\n`);
  } finally {
    await providers.close();
    await emulator.close();
    await temporal.close();
  }
});

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeCampaignReports } from '../../activities/report';
import type { RoundSummary } from '../../workflows/campaign/contract';
import type { SweepRecord } from '../../workflows/sweep/record';
import { roundReportOf, writeCampaignSummary } from '../helpers/round-report';

// report.html and summary.md of a campaign whose first round was a sweep, written from campaign.json (the summary a
// campaign leaves, built here) and its round reports: the arms side by side, the winner marked, and an inline SVG chart
// of each arm's eval loss over steps with the rung cuts. A campaign without a sweep has no such section.

const OPTIONS = { temporalUiUrl: 'http://ui.test', namespace: 'default' };

/**
 * Four arms (a grid: two learning rates × two schedules, one named with markup), rungs every 2 of 6 steps, η = 2:
 * rung 1 keeps arms 2 and 4, rung 2 keeps arm 2, which completes and wins.
 */
const SWEEP: SweepRecord = {
  metric: 'eval_loss',
  eta: 2,
  rungSteps: 2,
  arms: [
    { lr: 0.0005, schedule: 'cosine', rungs: [1.9], status: 'stopped', step: 2, stoppedAtRung: 1 },
    { lr: 0.0005, schedule: 'warm<up> & "decay"', rungs: [1.4, 1.1], status: 'completed', step: 6, final: 0.8 },
    { lr: 0.002, schedule: 'cosine', rungs: [2.1], status: 'stopped', step: 2, stoppedAtRung: 1 },
    { lr: 0.002, schedule: 'warm<up> & "decay"', rungs: [1.5, 1.3], status: 'stopped', step: 4, stoppedAtRung: 2 },
  ].map((a, i) => ({
    arm: i + 1,
    assign: { 'training.learningRate': a.lr, 'training.lrSchedule': a.schedule },
    workflowId: `c1-round-1-arm-${i + 1}`,
    status: a.status as 'stopped' | 'completed',
    rungs: a.rungs.map((value, r) => ({ rung: r + 1, step: 2 * (r + 1), value })),
    step: a.step,
    ...(a.stoppedAtRung ? { stoppedAtRung: a.stoppedAtRung } : {}),
    ...(a.final !== undefined ? { final: a.final } : {}),
    reportPath: `/reports/c1/sweep-r1/arm-${i + 1}/round-1.json`,
  })),
  decisions: [
    { rung: 1, step: 2, figures: [1.9, 1.4, 2.1, 1.5].map((value, i) => ({ arm: i + 1, value })), kept: [2, 4], stopped: [1, 3] },
    {
      rung: 2,
      step: 4,
      figures: [
        { arm: 2, value: 1.1 },
        { arm: 4, value: 1.3 },
      ],
      kept: [2],
      stopped: [4],
    },
  ],
  winner: { arm: 2, assign: { 'training.learningRate': 0.0005, 'training.lrSchedule': 'warm<up> & "decay"' }, value: 0.8 },
};

/** A campaign directory with campaign.json and a round report per round (round 1's: the winning arm's). */
function campaignDir(sweep?: SweepRecord): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-sweep-report-'));
  const rounds: RoundSummary[] = [1, 2].map((round) => ({
    round,
    workflowId: `c1-round-${round}`,
    status: 'completed',
    accuracy: 0.7,
    trainedLoss: 0.8,
    stepsApplied: 6,
    totalSteps: 6,
    gpuMinutes: 0.1,
    reportPath: path.join(dir, `round-${round}.json`),
    train: { path: 'train.jsonl' },
    ...(round === 1 && sweep ? { sweep } : {}),
  }));
  for (const r of rounds) {
    const report = roundReportOf({
      campaign_id: 'c1',
      round: r.round,
      trained_loss: 0.8,
      accuracy: 0.7,
      steps_applied: 6,
      steps_planned: 6,
    });
    fs.writeFileSync(r.reportPath, JSON.stringify(report));
  }
  writeCampaignSummary(dir, rounds);
  return dir;
}

/** The text of each cell of each row of the table whose first tag is `start`, tags stripped. */
function tableRows(page: string, start: string): string[][] {
  const table = page.slice(page.indexOf(start), page.indexOf('</table>', page.indexOf(start)));
  return [...table.matchAll(/<tr class="arm[^"]*"[^>]*>(.*?)<\/tr>/g)].map((row) =>
    [...row[1]!.matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((cell) => cell[1]!.replace(/<[^>]+>/g, '').trim()),
  );
}

/** Each polyline's arm and points, and each rung line's rung and x, from the sweep's chart. */
function chart(page: string) {
  const svg = page.slice(page.indexOf('<svg class="sweep-chart"'), page.indexOf('</svg>') + 6);
  const polylines = [...svg.matchAll(/<g data-arm="(\d+)"><polyline class="([^"]*)" points="([^"]*)"/g)].map((m) => ({
    arm: Number(m[1]),
    winner: m[2]!.includes('winner'),
    points: m[3]!.split(' ').map((p) => p.split(',').map(Number) as [number, number]),
  }));
  const rungs = [...svg.matchAll(/<line class="rung" data-rung="(\d+)" x1="([^"]*)"/g)].map((m) => ({
    rung: Number(m[1]),
    x: Number(m[2]),
  }));
  return { svg, polylines, rungs };
}

test('report.html of a swept campaign: the arms side by side with their fields, status, rung figures and final figure, the winner marked; summary.md says the sweep in a line', async () => {
  const { html, markdown } = await writeCampaignReports(campaignDir(SWEEP), OPTIONS);
  const page = fs.readFileSync(html, 'utf8');
  expect(page).toContain('<h2>Sweep (round 1): 4 arms by eval loss, the best 1/2 kept every 2 steps</h2>');
  const schedule = 'warm&lt;up&gt; &amp; &quot;decay&quot;';
  expect(page).toContain(
    '<tr><th>arm</th><th>training.learningRate</th><th>training.lrSchedule</th><th>status</th><th>step</th><th>rung 1 (step 2)</th><th>rung 2 (step 4)</th><th>final eval loss</th></tr>',
  );
  expect(tableRows(page, '<table class="sweep">')).toEqual([
    ['■ 1', '0.0005', 'cosine', 'stopped at rung 1', '2', '1.9000', '–', '–'],
    ['■ 2 ★ winner', '0.0005', schedule, 'completed', '6', '1.4000', '1.1000', '0.8000'],
    ['■ 3', '0.002', 'cosine', 'stopped at rung 1', '2', '2.1000', '–', '–'],
    ['■ 4', '0.002', schedule, 'stopped at rung 2', '4', '1.5000', '1.3000', '–'],
  ]);
  expect(page.match(/<tr class="arm winner"/g)).toHaveLength(1);
  expect(page).toContain('<tr class="arm winner" data-arm="2">');
  expect(page).toContain(`winner: arm 2 (training.learningRate=0.0005, training.lrSchedule=${schedule}), eval loss 0.8000`);
  expect(page).toContain('<li>rung 2 (step 4): 2 arms measured, kept 2; stopped 4</li>');
  // Every text escaped: the schedule's markup never reaches the page as markup.
  expect(page).not.toContain('warm<up>');
  expect(fs.readFileSync(markdown, 'utf8')).toContain(
    '- round 1: a sweep of 4 arms by eval loss (rung 1 kept 2 of 4, rung 2 kept 1 of 2); winner arm 2 (training.learningRate=0.0005, training.lrSchedule=warm<up> & "decay"), eval loss 0.8000',
  );
});

test("report.html of a swept campaign: an inline SVG chart, one polyline per arm through its rung figures (and its final figure at its last step), a vertical line per rung cut, a stopped arm's line ending at its rung", async () => {
  const page = fs.readFileSync((await writeCampaignReports(campaignDir(SWEEP), OPTIONS)).html, 'utf8');
  const { svg, polylines, rungs } = chart(page);
  expect(svg).toMatch(/^<svg class="sweep-chart" xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  expect(svg).not.toMatch(/<script|href=|src=/); // self-contained: nothing fetched, nothing run
  expect(polylines.map((p) => [p.arm, p.points.length, p.winner])).toEqual([
    [1, 1, false],
    [2, 3, true],
    [3, 1, false],
    [4, 2, false],
  ]);
  expect(rungs.map((r) => r.rung)).toEqual([1, 2]);
  expect(svg).toContain('rung 1: 2 of 4 kept');
  // x: a stopped arm's line ends on its rung's line; the winner's goes on to its last step, right of every rung.
  const xEnd = (arm: number) => polylines.find((p) => p.arm === arm)!.points.at(-1)![0];
  expect([xEnd(1), xEnd(3), xEnd(4)]).toEqual([rungs[0]!.x, rungs[0]!.x, rungs[1]!.x]);
  expect(xEnd(2)).toBeGreaterThan(rungs[1]!.x);
  // y: a higher figure is drawn higher (SVG's y grows downward): at rung 1, arm 3 (2.1) above arm 1 (1.9) above arm 2 (1.4).
  const yAtRung1 = (arm: number) => polylines.find((p) => p.arm === arm)!.points[0]![1];
  expect(yAtRung1(3)).toBeLessThan(yAtRung1(1));
  expect(yAtRung1(1)).toBeLessThan(yAtRung1(2));
  expect(svg).not.toContain('warm<up>');
});

test('report.html and summary.md of a campaign without a sweep have no sweep section', async () => {
  const { html, markdown } = await writeCampaignReports(campaignDir(), OPTIONS);
  expect(fs.readFileSync(html, 'utf8')).not.toMatch(/Sweep|sweep-chart/);
  expect(fs.readFileSync(markdown, 'utf8')).not.toContain('sweep');
});

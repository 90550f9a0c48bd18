import { bestCheckpoint, roundCheckpoints } from './checkpoints';
import fs from 'node:fs';
import path from 'node:path';
import { joinLocation, readJson, storeFor } from '../config/io/artifacts';
import { maskSecretsIn } from '../config/io/secrets';
import { stageFacts, type ShownStage } from '../config/rules/stages';
import { lossPerTokenOf } from './step-records';
import { ROUND_KIND, ROUND_KINDS } from '../config/rules/round-kinds';
import { readRoundReport, type RoundReport } from '../config/io/round-report';
import type { SweepRecord } from '../workflows/sweep/record';
import { escapeHtml, fmt, pct } from './report-text';
import { sweepHtml, sweepMarkdown, type ShownSweep } from './report-sweep';

/**
 * The campaign report people look at: `report.html` (self-contained: Chart.js and the data inlined, no network)
 * and `summary.md` (for a pull request), built from the campaign's files on disk.
 */

export interface CampaignReportData {
  campaignId: string;
  status: string;
  stopReason?: string;
  rounds: RoundReport[];
  /** Staged campaigns: the stages started, from campaign.json. */
  stages?: ShownStage[];
  /** `promotion`: the challenger's decision against its line's champion. */
  promotion?: PromotionShown;
  /** `sweep`: the round run as arms (the first), from campaign.json. */
  sweep?: ShownSweep;
  flips: { from: number; to: number; fixed: Flip[]; regressed: Flip[] }[];
  gpuMinutes: number;
  costUsd?: number;
  temporalUiUrl: string;
  namespace: string;
}

interface PromotionShown {
  line: string;
  status: string;
  reason?: string;
  pendingSinceMs?: number;
  champion?: { checkpointId: string; registry?: { name: string; version: string } };
}

/** The promotion's line in summary.md. */
function promotionLine(p: PromotionShown | undefined): string[] {
  if (!p) return [];
  const since = p.status === 'pending-approval' && p.pendingSinceMs ? ` since ${new Date(p.pendingSinceMs).toISOString()}` : '';
  const champion = p.champion
    ? `; champion \`${p.champion.checkpointId}\`${p.champion.registry ? ` (${p.champion.registry.name} v${p.champion.registry.version})` : ''}`
    : '';
  return [`- promotion (line ${p.line}): ${p.status}${since}${p.reason ? `: ${p.reason}` : ''}${champion}`];
}

interface Flip {
  line: number;
  prompt: string;
  expected: string;
  before: string;
  after: string;
}

export async function loadCampaignReportData(
  campaignDir: string,
  options: { temporalUiUrl: string; namespace: string },
): Promise<CampaignReportData> {
  const summaryFile = joinLocation(campaignDir, 'campaign.json');
  const summary = await readJson<{
    campaignId: string;
    status: string;
    stopReason?: string;
    gpuMinutes: number;
    costUsd?: number;
    rounds: { round: number; reportPath: string; sweep?: SweepRecord }[];
    stages?: ShownStage[];
    promotion?: PromotionShown;
  }>(summaryFile);
  if (!summary) throw new Error(`${summaryFile}: no campaign summary (has a round finished yet?)`);
  const rounds = (await Promise.all(summary.rounds.map((r) => readRoundReport(r.reportPath)))).filter(
    (r): r is RoundReport => r !== undefined,
  );
  const flips = rounds.slice(1).map((after, i) => {
    const before = rounds[i]!;
    const previous = new Map(before.evaluations.map((e) => [e.line, e]));
    const fixed: Flip[] = [];
    const regressed: Flip[] = [];
    for (const e of after.evaluations) {
      const p = previous.get(e.line);
      if (!p || p.match === e.match) continue;
      const shown = (x: typeof e) => x.completion ?? (x.margin === undefined ? '' : `margin ${x.margin.toFixed(3)}`);
      const flip = { line: e.line, prompt: e.prompt, expected: e.expected ?? e.chosen ?? '', before: shown(p), after: shown(e) };
      (e.match ? fixed : regressed).push(flip);
    }
    return { from: before.round, to: after.round, fixed, regressed };
  });
  const swept = summary.rounds.find((r) => r.sweep);
  return {
    campaignId: summary.campaignId,
    status: summary.status,
    stopReason: summary.stopReason,
    rounds,
    ...(summary.stages ? { stages: summary.stages } : {}),
    ...(swept ? { sweep: { round: swept.round, ...swept.sweep! } } : {}),
    ...(summary.promotion ? { promotion: summary.promotion } : {}),
    flips,
    gpuMinutes: summary.gpuMinutes,
    costUsd: summary.costUsd,
    ...options,
  };
}

/** Beside a round's accuracy (pass@1), its pass@n when evaluation drew n > 1 answers per prompt. */
const passAtKNote = (r: Pick<RoundReport, 'pass_at_k'>) => (r.pass_at_k ? ` (pass@${r.pass_at_k.k} ${pct(r.pass_at_k.value)})` : '');

function uiLink(data: CampaignReportData, workflowId: string): string {
  return `${data.temporalUiUrl.replace(/\/$/, '')}/namespaces/${encodeURIComponent(data.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

function chartJsSource(): string {
  // chart.js exports only its module entry; the UMD build sits beside it in dist/.
  return fs.readFileSync(path.join(path.dirname(require.resolve('chart.js')), 'chart.umd.min.js'), 'utf8');
}

export function renderCampaignHtml(data: CampaignReportData): string {
  const chartData = {
    rounds: data.rounds.map((r) => r.round),
    accuracy: data.rounds.map((r) => r.accuracy),
    baseline: data.rounds.map((r) => r.baseline_loss),
    trained: data.rounds.map((r) => r.trained_loss),
    steps: data.rounds.map((r) => ({
      round: r.round,
      points: r.steps.map((s) => ({ x: s.step, y: lossPerTokenOf(s) })),
    })),
    evalCurves: evalCurves(data),
    rewards: stepSeries(data, 'meanReward'),
    margins: stepSeries(data, 'margin'),
    preference: stepSeries(data, 'accuracy'),
  };
  const evalChart = chartData.evalCurves.length
    ? '<h2>Evaluation during training (eval loss; the metric where sampled)</h2><div class="chart"><canvas id="evalCurve"></canvas></div>'
    : '';
  const policyCharts = [
    chartData.rewards.length ? '<div><h2>GRPO: mean reward per step</h2><div class="chart"><canvas id="reward"></canvas></div></div>' : '',
    chartData.margins.length
      ? '<div><h2>DPO: preference margin and accuracy per step</h2><div class="chart"><canvas id="margin"></canvas></div></div>'
      : '',
  ].join('');
  const tested = data.rounds.some((r) => r.test);
  const rows = data.rounds
    .map(
      (r) =>
        `<tr><td>${r.round}</td><td class="${r.status}">${escapeHtml(r.status)}${r.error_type ? ` (${escapeHtml(r.error_type)})` : ''}${earlyStopNote(r)}</td><td>${pct(r.accuracy)}${passAtKNote(r)}</td>${tested ? `<td>${pct(r.test?.accuracy ?? null)}</td>` : ''}` +
        `<td>${fmt(r.baseline_loss)} → ${fmt(r.trained_loss)}</td><td>${r.steps_applied}/${r.steps_planned}</td><td>${fmt(r.gpu_minutes, 2)}</td>` +
        `<td>${r.estimated_cost_usd === null ? '–' : `$${r.estimated_cost_usd.toFixed(2)}`}</td>` +
        `<td><a href="${escapeHtml(uiLink(data, r.workflow_id))}">${escapeHtml(r.workflow_id)}</a></td><td><code>${escapeHtml(r.train_sha256.slice(0, 12))}</code></td></tr>`,
    )
    .join('\n');
  const recoveries = data.rounds.flatMap((r) => (r.recoveries ?? []).map((x) => ({ round: r.round, ...x })));
  const recoveryRows = recoveries
    .map(
      (x) =>
        `<tr><td>${x.round}</td><td>${escapeHtml(x.phase)}</td><td>${escapeHtml(x.error_type)}${x.code ? ` (${escapeHtml(x.code)})` : ''}</td>` +
        `<td>${x.failed_at_step} → ${x.rolled_back_to}</td><td>${x.new_trainer ? 'new trainer' : 'new session'}</td><td>${fmt(x.gpu_minutes_lost, 3)}</td></tr>`,
    )
    .join('\n');
  const flipSections = data.flips
    .map((f) => {
      const list = (items: Flip[]) =>
        items.length === 0
          ? '<p class="none">none</p>'
          : `<table><tr><th>line</th><th>prompt</th><th>expected</th><th>before</th><th>after</th></tr>${items
              .map(
                (i) =>
                  `<tr><td>${i.line}</td><td>${escapeHtml(i.prompt)}</td><td>${escapeHtml(i.expected)}</td><td>${escapeHtml(i.before)}</td><td>${escapeHtml(i.after)}</td></tr>`,
              )
              .join('')}</table>`;
      return `<h3>Round ${f.from} → ${f.to}: ${f.fixed.length} fixed, ${f.regressed.length} regressed</h3><h4>Fixed</h4>${list(f.fixed)}<h4>Regressed</h4>${list(f.regressed)}`;
    })
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Roundhouse campaign ${escapeHtml(data.campaignId)}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1b1f24;max-width:1100px}
h1{font-size:1.5rem} .meta{color:#57606a} table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}
td,th{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top} th{background:#f6f8fa}
.completed{color:#1a7f37}.failed{color:#cf222e}.cancelled,.stopped{color:#9a6700} .charts{display:grid;grid-template-columns:1fr 1fr;gap:2rem}
.chart{position:relative;height:300px} .none{color:#57606a} tr.winner td{background:#dafbe1} td.cut{color:#9a6700}
</style></head><body>
<h1>Campaign ${escapeHtml(data.campaignId)}</h1>
<p class="meta">Status <b>${escapeHtml(data.status)}</b>${data.stopReason ? ` — ${escapeHtml(data.stopReason)}` : ''}; ${data.rounds.length} rounds; ${fmt(data.gpuMinutes, 2)} GPU-minutes${data.costUsd !== undefined && data.costUsd !== null ? `; estimated cost $${data.costUsd.toFixed(2)}` : ''}. <a href="${escapeHtml(uiLink(data, data.campaignId))}">Campaign in the Temporal UI</a></p>
${promotionLine(data.promotion)
  .map((l) => `<p class="meta">${escapeHtml(l.replace(/^- /, ''))}</p>`)
  .join('')}
${stagesHtml(data.stages)}<div class="charts">
<div><h2>Metric per round</h2><div class="chart"><canvas id="accuracy"></canvas></div></div>
<div><h2>Eval loss per round (baseline vs trained)</h2><div class="chart"><canvas id="evalLoss"></canvas></div></div>
</div>
<h2>Training loss per step (per trained token; DPO: mean loss per pair)</h2><div class="chart"><canvas id="stepLoss"></canvas></div>
${evalChart}
${policyCharts ? `<div class="charts">${policyCharts}</div>` : ''}
<h2>Rounds</h2>
<table><tr><th>round</th><th>status</th><th>accuracy</th>${tested ? '<th>test (held out)</th>' : ''}<th>eval loss (baseline → trained)</th><th>steps</th><th>GPU-min</th><th>est. cost</th><th>workflow</th><th>train sha256</th></tr>
${rows}</table>
${sweepHtml(data.sweep)}<h2>Recoveries from provider failures</h2>
${recoveryRows ? `<table><tr><th>round</th><th>phase</th><th>failure</th><th>step → resumed from</th><th>on</th><th>GPU-min lost</th></tr>\n${recoveryRows}</table>` : '<p class="none">none</p>'}
<h2>Per-example flips between rounds</h2>
${flipSections || '<p class="none">one round only</p>'}
<script id="report-data" type="application/json">${JSON.stringify(chartData).replace(/</g, '\\u003c')}</script>
<script>${chartJsSource()}</script>
<script>
const d = JSON.parse(document.getElementById('report-data').textContent);
const colors = ['#0969da', '#1a7f37', '#bf3989', '#9a6700', '#8250df', '#cf222e'];
const common = { responsive: true, maintainAspectRatio: false, animation: false };
new Chart(document.getElementById('accuracy'), { type: 'line', data: { labels: d.rounds.map((r) => 'round ' + r), datasets: [{ label: 'accuracy', data: d.accuracy, borderColor: colors[0], backgroundColor: colors[0] }] }, options: { ...common, scales: { y: { min: 0, max: 1 } } } });
new Chart(document.getElementById('evalLoss'), { type: 'bar', data: { labels: d.rounds.map((r) => 'round ' + r), datasets: [{ label: 'baseline', data: d.baseline, backgroundColor: '#8c959f' }, { label: 'trained', data: d.trained, backgroundColor: colors[1] }] }, options: common });
new Chart(document.getElementById('stepLoss'), { type: 'line', data: { datasets: d.steps.map((s, i) => ({ label: 'round ' + s.round, data: s.points, borderColor: colors[i % colors.length], pointRadius: 0 })) }, options: { ...common, parsing: true, scales: { x: { type: 'linear', title: { display: true, text: 'step' } }, y: { title: { display: true, text: 'loss / token' } } } } });
const perStep = (id, series, label, extra = []) => document.getElementById(id) && new Chart(document.getElementById(id), { type: 'line', data: { datasets: [...series.map((s, i) => ({ label: label + ' (round ' + s.round + ')', data: s.points, borderColor: colors[i % colors.length], pointRadius: 0 })), ...extra] }, options: { ...common, scales: { x: { type: 'linear', title: { display: true, text: 'step' } } } } });
perStep('reward', d.rewards, 'mean reward');
if (document.getElementById('evalCurve')) new Chart(document.getElementById('evalCurve'), { type: 'line', data: { datasets: [
  ...d.evalCurves.map((c, i) => ({ label: 'eval loss (round ' + c.round + ')', data: c.loss, borderColor: colors[i % colors.length], backgroundColor: colors[i % colors.length], yAxisID: 'y' })),
  ...d.evalCurves.filter((c) => c.metric.length).map((c, i) => ({ label: 'metric (round ' + c.round + ')', data: c.metric, borderColor: colors[(i + 3) % colors.length], borderDash: [4, 4], yAxisID: 'y1' })),
  ...d.evalCurves.filter((c) => c.best).map((c) => ({ label: 'best (round ' + c.round + ')', data: [c.best], type: 'scatter', pointRadius: 7, pointStyle: 'star', borderColor: '#cf222e', yAxisID: 'y' })),
] }, options: { ...common, scales: { x: { type: 'linear', title: { display: true, text: 'step' } }, y: { title: { display: true, text: 'eval loss' } }, y1: { position: 'right', min: 0, max: 1, display: d.evalCurves.some((c) => c.metric.length), grid: { drawOnChartArea: false } } } } });
perStep('margin', d.margins, 'margin (nats)', d.preference.map((s, i) => ({ label: 'preference accuracy (round ' + s.round + ')', data: s.points, borderColor: colors[(i + 3) % colors.length], borderDash: [4, 4], pointRadius: 0 })));
document.body.dataset.rendered = String(Chart.instances ? Object.keys(Chart.instances).length : 0);
</script>
</body></html>
`;
}

/**
 * The eval-loss curve of each round that evaluated during training: its baseline (step 0), the evaluations, and its
 * trained loss (at the best step when it stopped early); the metric where it was measured; the best point.
 */
function evalCurves(data: CampaignReportData) {
  return data.rounds
    .filter((r) => (r.evaluation_curve ?? []).length > 0)
    .map((r) => {
      const curve = r.evaluation_curve!;
      const finalStep = r.early_stop?.best_step ?? r.steps_applied;
      const loss = [
        ...(r.baseline_loss === null ? [] : [{ x: 0, y: r.baseline_loss }]),
        ...curve.map((p) => ({ x: p.step, y: p.loss })),
        ...(r.trained_loss === null || r.early_stop ? [] : [{ x: finalStep, y: r.trained_loss }]),
      ];
      const metric = curve.filter((p) => p.metric !== null).map((p) => ({ x: p.step, y: p.metric! }));
      const best = r.early_stop ? loss.find((p) => p.x === r.early_stop!.best_step) : undefined;
      return { round: r.round, loss, metric, best };
    });
}

function earlyStopNote(r: RoundReport): string {
  const e = r.early_stop;
  return e ? ` <span class="meta">(early stop at step ${e.stopped_at_step}; finished from step ${e.best_step})</span>` : '';
}

/** Per-step series of one field, for the rounds whose steps carry it. */
function stepSeries(
  data: CampaignReportData,
  field: 'meanReward' | 'margin' | 'accuracy',
): { round: number; points: { x: number; y: number }[] }[] {
  return data.rounds
    .filter((r) => r.steps.some((s) => typeof s[field] === 'number'))
    .map((r) => ({
      round: r.round,
      points: r.steps.filter((s) => typeof s[field] === 'number').map((s) => ({ x: s.step, y: s[field]! })),
    }));
}

/** The campaign's best checkpoint (`roundhouse checkpoints` lists them all). */
function bestLine(rounds: RoundReport[]): string[] {
  const best = bestCheckpoint(rounds.flatMap((r) => roundCheckpoints(r)));
  return best
    ? [
        `- best checkpoint: round ${best.round}, \`${best.checkpoint_id}\` (accuracy ${pct(best.metric ?? null)}, step ${best.step})` +
          (typeof best.test_metric === 'number' ? `; held-out test: ${pct(best.test_metric)}` : ''),
      ]
    : [];
}

/** A cell of the stages table: text, or a checkpoint id (with what of it was loaded), shown as code. */
type StageCell = string | { checkpoint: string; carried?: string };

const STAGE_HEADERS = ['stage', 'kind', 'rounds', 'metric', 'gate', 'ended', 'started from', 'passed on'];

/** A staged campaign's stages as table rows, the same facts `status` shows. */
function stageRows(stages: ShownStage[]): StageCell[][] {
  return stages.map((s) => {
    const f = stageFacts(s);
    return [
      f.label,
      s.kind,
      f.rounds,
      f.headline,
      f.gate ?? '–',
      s.endedBy ?? '–',
      f.startedFrom ? { checkpoint: f.startedFrom, ...(f.carried ? { carried: f.carried } : {}) } : 'the base model',
      f.passedOn ? { checkpoint: f.passedOn } : '–',
    ];
  });
}

function stagesMarkdown(stages: ShownStage[] | undefined): string[] {
  if (!stages?.length) return [];
  const cell = (c: StageCell) => (typeof c === 'string' ? c : `\`${c.checkpoint}\`${c.carried ? ` (${c.carried})` : ''}`);
  return [
    '#### Stages',
    '',
    `| ${STAGE_HEADERS.join(' | ')} |`,
    `|${'---|'.repeat(STAGE_HEADERS.length)}`,
    ...stageRows(stages).map((row) => `| ${row.map(cell).join(' | ')} |`),
    '',
    '#### Rounds',
    '',
  ];
}

function stagesHtml(stages: ShownStage[] | undefined): string {
  if (!stages?.length) return '';
  const cell = (c: StageCell) =>
    typeof c === 'string' ? escapeHtml(c) : `<code>${escapeHtml(c.checkpoint)}</code>${c.carried ? ` (${escapeHtml(c.carried)})` : ''}`;
  const rows = stageRows(stages).map((row) => `<tr>${row.map((c) => `<td>${cell(c)}</td>`).join('')}</tr>`);
  return `<h2>Stages</h2>\n<table><tr>${STAGE_HEADERS.map((h) => `<th>${h}</th>`).join('')}</tr>\n${rows.join('\n')}</table>\n`;
}

export function renderCampaignMarkdown(data: CampaignReportData): string {
  const tested = data.rounds.some((r) => r.test);
  const lines = [
    `### Roundhouse campaign \`${data.campaignId}\`: ${data.status}${data.stopReason ? ` (${data.stopReason})` : ''}`,
    '',
    ...stagesMarkdown(data.stages),
    `| round | status | accuracy${tested ? ' | test (held out)' : ''} | eval loss (baseline → trained) | steps | GPU-min | est. cost |`,
    `|---|---|---|${tested ? '---|' : ''}---|---|---|---|`,
    ...data.rounds.map(
      (r) =>
        `| ${r.round} | ${r.status}${r.error_type ? ` (${r.error_type})` : ''} | ${pct(r.accuracy)}${passAtKNote(r)}${tested ? ` | ${pct(r.test?.accuracy ?? null)}` : ''} | ${fmt(r.baseline_loss)} → ${fmt(r.trained_loss)} | ${r.steps_applied}/${r.steps_planned} | ${fmt(r.gpu_minutes, 2)} | ${r.estimated_cost_usd === null ? '–' : `$${r.estimated_cost_usd.toFixed(2)}`} |`,
    ),
    '',
    ...kindLines(data.rounds),
    ...data.rounds
      .filter((r) => r.early_stop)
      .map(
        (r) =>
          `- round ${r.round}: stopped early at step ${r.early_stop!.stopped_at_step} (no better eval ${r.early_stop!.on} since step ${r.early_stop!.best_step}); finished from the step-${r.early_stop!.best_step} checkpoint \`${r.early_stop!.best_checkpoint_id}\``,
      ),
    ...sweepMarkdown(data.sweep),
    ...data.flips.map((f) => `- round ${f.from} → ${f.to}: ${f.fixed.length} examples fixed, ${f.regressed.length} regressed`),
    ...bestLine(data.rounds),
    ...promotionLine(data.promotion),
    '',
    `Total: ${fmt(data.gpuMinutes, 2)} GPU-minutes${data.costUsd !== undefined && data.costUsd !== null ? `, estimated $${data.costUsd.toFixed(2)}` : ''}.`,
  ];
  return `${lines.join('\n')}\n`;
}

/** Each round's line of its kind (config/rules/round-kinds.ts `summaryLine`), grouped by kind in the table's order. */
function kindLines(rounds: RoundReport[]): string[] {
  return ROUND_KINDS.flatMap((kind) =>
    rounds
      .filter((r) => r.kind === kind)
      .map((r) => ROUND_KIND[kind].summaryLine?.(r, { number: (v) => fmt(v), percent: (v) => pct(v) }))
      .filter((line): line is string => line !== undefined),
  );
}

/** Writes report.html and summary.md next to campaign.json, atomically. */
export async function writeCampaignReports(
  campaignDir: string,
  options: { temporalUiUrl: string; namespace: string },
): Promise<{ html: string; markdown: string }> {
  const data = maskSecretsIn(await loadCampaignReportData(campaignDir, options)) as CampaignReportData;
  const html = joinLocation(campaignDir, 'report.html');
  const markdown = joinLocation(campaignDir, 'summary.md');
  await storeFor(html).write(html, renderCampaignHtml(data), 'text/html; charset=utf-8');
  await storeFor(markdown).write(markdown, renderCampaignMarkdown(data), 'text/markdown; charset=utf-8');
  return { html, markdown };
}

import { describeAssignment, lowerIsBetter, type SweepValue } from '../config/rules/sweep';
import type { SweepArmRecord, SweepRecord } from '../workflows/sweep/record';
import { escapeHtml, fmt, pct } from './report-text';

/**
 * A sweep in the campaign report: its arms side by side (the fields each set, how it ended, its figure at each rung
 * and its final one, the winner marked), the decision at each rung, and a chart of each arm's eval metric over steps
 * (an inline SVG: the rung cuts as vertical lines, a stopped arm's line ending at its rung). No script, no network.
 */

/** The sweep's record, and the campaign round it was. */
export type ShownSweep = SweepRecord & { round: number };

const METRIC_NAME: Record<SweepRecord['metric'], string> = { eval_loss: 'eval loss', accuracy: 'accuracy' };

/** An arm's figure as the metric reads: a loss to 4 places, an accuracy in percent. */
function figure(sweep: SweepRecord, value: number | undefined): string {
  return sweep.metric === 'accuracy' ? pct(value) : fmt(value, 4);
}

/** A field's value as `describeAssignment` shows it. */
const shown = (v: SweepValue) => (typeof v === 'number' ? String(Number(v.toPrecision(4))) : String(v));

/** The arms' points: each rung figure at its step, then the final figure at the arm's last step. */
function pointsOf(arm: SweepArmRecord): { x: number; y: number }[] {
  const points = arm.rungs.map((r) => ({ x: r.step, y: r.value }));
  if (arm.final !== undefined) points.push({ x: arm.step, y: arm.final });
  return points.filter((p) => Number.isFinite(p.y));
}

/** A distinct colour per arm (up to 64): the golden angle round the hue circle. */
const colourOf = (i: number) => `hsl(${Math.round((i * 137.508) % 360)} 70% 38%)`;

/** How an arm ended in the sweep. */
function outcome(arm: SweepArmRecord): string {
  return arm.stoppedAtRung !== undefined ? `stopped at rung ${arm.stoppedAtRung}` : arm.status;
}

export function sweepHtml(sweep: ShownSweep | undefined): string {
  if (!sweep) return '';
  const metric = METRIC_NAME[sweep.metric];
  const fields = [...new Set(sweep.arms.flatMap((a) => Object.keys(a.assign)))];
  const winner = sweep.winner;
  const head = [
    'arm',
    ...fields.map(escapeHtml),
    'status',
    'step',
    ...sweep.decisions.map((d) => `rung ${d.rung} (step ${d.step})`),
    `final ${metric}`,
  ];
  const rows = sweep.arms.map((a, i) => {
    const won = winner?.arm === a.arm;
    const rungs = sweep.decisions.map((d) => {
      const at = a.rungs.find((r) => r.rung === d.rung);
      return `<td${a.stoppedAtRung === d.rung ? ' class="cut"' : ''}>${at ? figure(sweep, at.value) : '–'}</td>`;
    });
    return (
      `<tr class="arm${won ? ' winner' : ''}" data-arm="${a.arm}"><td><span style="color:${colourOf(i)}">■</span> ${a.arm}${won ? ' <b>★ winner</b>' : ''}</td>` +
      fields.map((f) => `<td>${f in a.assign ? escapeHtml(shown(a.assign[f]!)) : '–'}</td>`).join('') +
      `<td class="${escapeHtml(a.status)}">${escapeHtml(outcome(a))}</td><td>${a.step}</td>${rungs.join('')}<td>${figure(sweep, a.final)}</td></tr>`
    );
  });
  const decisions = sweep.decisions.map(
    (d) =>
      `<li>rung ${d.rung} (step ${d.step}): ${d.figures.length} arms measured, kept ${d.kept.join(', ') || 'none'}; stopped ${d.stopped.join(', ') || 'none'}</li>`,
  );
  const won = winner
    ? `winner: arm ${winner.arm} (${escapeHtml(describeAssignment(winner.assign))}), ${metric} ${figure(sweep, winner.value)}`
    : 'no winner';
  return `<h2>Sweep (round ${sweep.round}): ${sweep.arms.length} arms by ${metric}, the best 1/${sweep.eta} kept every ${sweep.rungSteps} steps</h2>
<p class="meta">${won}; ${lowerIsBetter(sweep.metric) ? 'lower' : 'higher'} is better.</p>
<table class="sweep"><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr>
${rows.join('\n')}</table>
${decisions.length ? `<ul class="decisions">${decisions.join('')}</ul>\n` : ''}${sweepChart(sweep)}
`;
}

const W = 720;
const H = 300;
const PAD = { left: 64, right: 24, top: 24, bottom: 40 };

/** Each arm's eval metric over steps, as an inline SVG: one polyline per arm with a figure, a vertical line per rung. */
function sweepChart(sweep: ShownSweep): string {
  const lines = sweep.arms.map((a, i) => ({ arm: a, colour: colourOf(i), points: pointsOf(a) }));
  const all = lines.flatMap((l) => l.points);
  if (all.length === 0) return '';
  const maxX = Math.max(1, ...all.map((p) => p.x), ...sweep.decisions.map((d) => d.step));
  let [lo, hi] = [Math.min(...all.map((p) => p.y)), Math.max(...all.map((p) => p.y))];
  const margin = (hi - lo) * 0.08 || Math.abs(hi) * 0.1 || 1;
  [lo, hi] = [lo - margin, hi + margin];
  const x = (v: number) => (PAD.left + (v / maxX) * (W - PAD.left - PAD.right)).toFixed(1);
  const y = (v: number) => (PAD.top + (1 - (v - lo) / (hi - lo)) * (H - PAD.top - PAD.bottom)).toFixed(1);
  const [top, bottom] = [PAD.top, H - PAD.bottom];
  const yTicks = Array.from({ length: 5 }, (_, k) => lo + ((hi - lo) * k) / 4).map(
    (v) =>
      `<line x1="${PAD.left - 4}" x2="${PAD.left}" y1="${y(v)}" y2="${y(v)}" stroke="#57606a"/><text x="${PAD.left - 6}" y="${y(v)}" text-anchor="end" dominant-baseline="middle">${escapeHtml(figure(sweep, v))}</text>`,
  );
  const xTicks = [...new Set([0, ...sweep.decisions.map((d) => d.step), maxX])].map(
    (s) => `<text x="${x(s)}" y="${bottom + 16}" text-anchor="middle">${s}</text>`,
  );
  const rungs = sweep.decisions.map(
    (d) =>
      `<line class="rung" data-rung="${d.rung}" x1="${x(d.step)}" x2="${x(d.step)}" y1="${top}" y2="${bottom}" stroke="#8c959f" stroke-dasharray="4 3"/>` +
      `<text x="${x(d.step)}" y="${top - 8}" text-anchor="middle">rung ${d.rung}: ${d.kept.length} of ${d.figures.length} kept</text>`,
  );
  const arms = lines
    .filter((l) => l.points.length > 0)
    .map(({ arm, colour, points }) => {
      const won = sweep.winner?.arm === arm.arm;
      const label = escapeHtml(`arm ${arm.arm} (${describeAssignment(arm.assign)}): ${outcome(arm)}`);
      const dots = points.map(
        (p) =>
          `<circle cx="${x(p.x)}" cy="${y(p.y)}" r="${won ? 4 : 3}" fill="${colour}"><title>${label}; step ${p.x}: ${escapeHtml(figure(sweep, p.y))}</title></circle>`,
      );
      const end = points[points.length - 1]!;
      return (
        `<g data-arm="${arm.arm}"><polyline class="arm${won ? ' winner' : ''}" points="${points.map((p) => `${x(p.x)},${y(p.y)}`).join(' ')}" ` +
        `fill="none" stroke="${colour}" stroke-width="${won ? 3 : 1.5}"><title>${label}</title></polyline>${dots.join('')}` +
        `<text x="${Number(x(end.x)) + 6}" y="${y(end.y)}" dominant-baseline="middle" fill="${colour}">${arm.arm}${won ? ' ★' : ''}</text></g>`
      );
    });
  const metric = METRIC_NAME[sweep.metric];
  return `<svg class="sweep-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${escapeHtml(`${metric} of each arm over steps`)}" font-size="11" font-family="system-ui,sans-serif" fill="#1b1f24">
<line x1="${PAD.left}" x2="${PAD.left}" y1="${top}" y2="${bottom}" stroke="#57606a"/><line x1="${PAD.left}" x2="${W - PAD.right}" y1="${bottom}" y2="${bottom}" stroke="#57606a"/>
${yTicks.join('')}
${xTicks.join('')}<text x="${(PAD.left + W - PAD.right) / 2}" y="${H - 4}" text-anchor="middle">step</text><text x="14" y="${(top + bottom) / 2}" transform="rotate(-90 14 ${(top + bottom) / 2})" text-anchor="middle">${escapeHtml(metric)}</text>
${rungs.join('\n')}
${arms.join('\n')}
</svg>`;
}

/** The sweep's line in summary.md. */
export function sweepMarkdown(sweep: ShownSweep | undefined): string[] {
  if (!sweep) return [];
  const metric = METRIC_NAME[sweep.metric];
  const winner = sweep.winner
    ? `winner arm ${sweep.winner.arm} (${describeAssignment(sweep.winner.assign)}), ${metric} ${figure(sweep, sweep.winner.value)}`
    : 'no winner';
  const cuts = sweep.decisions.map((d) => `rung ${d.rung} kept ${d.kept.length} of ${d.figures.length}`).join(', ');
  return [`- round ${sweep.round}: a sweep of ${sweep.arms.length} arms by ${metric}${cuts ? ` (${cuts})` : ''}; ${winner}`];
}

import { Command } from 'commander';
import { joinLocation } from '../config/io/artifacts';
import { modules } from './modules';

export function checkpointsCommand(): Command {
  return new Command('checkpoints')
    .description("List every checkpoint a campaign's rounds saved (training and sampler, with step and eval figures) and the best")
    .argument('<campaign>', 'campaign id')
    .option('--json', 'print them as JSON')
    .addHelpText('after', '\nExample:\n  roundhouse checkpoints support-tickets-20261129120000')
    .action(async (id: string, opts: { json?: boolean }) => {
      const { cliContext, reportRoot } = modules.context();
      const { settings } = cliContext();
      const { checkpoints, best, retention } = await modules.report().listCampaignCheckpoints(id, joinLocation(reportRoot(settings), id));
      if (opts.json) {
        process.stdout.write(
          `${JSON.stringify({ campaignId: id, checkpoints, best: best ?? null, retention: retention ?? null }, null, 2)}\n`,
        );
        return;
      }
      // With `retention` in the spec: why each checkpoint is kept, or that it is expendable (deleted, where the provider can).
      const kept = new Map((retention?.kept ?? []).map((c) => [c.checkpoint_id, `kept: ${c.reasons.join(', ')}`]));
      const dropped = new Map((retention?.expendable ?? []).map((c) => [c.checkpoint_id, c.deleted ? 'deleted' : 'expendable']));
      const pct = (x: number | null | undefined) => (typeof x === 'number' ? `${(x * 100).toFixed(1)}%` : '–');
      const loss = (x: number | null | undefined) => (typeof x === 'number' ? x.toFixed(3) : '–');
      const rows = checkpoints.map((c) => [
        String(c.round),
        c.kind,
        String(c.step),
        pct(c.metric),
        loss(c.eval_loss),
        ...(retention ? [kept.get(c.checkpoint_id) ?? dropped.get(c.checkpoint_id) ?? '–'] : []),
        `${c.checkpoint_id}${c === best ? '  ← best' : ''}`,
      ]);
      const header = ['round', 'kind', 'step', 'metric', 'eval loss', ...(retention ? ['retention'] : []), 'checkpoint'];
      const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
      for (const r of [header, ...rows])
        process.stdout.write(
          `${r
            .map((x, i) => x.padEnd(widths[i]!))
            .join('  ')
            .trimEnd()}\n`,
        );
      if (best) process.stdout.write(`best: round ${best.round}, ${best.checkpoint_id} (metric ${pct(best.metric)})\n`);
      if (retention?.note) process.stdout.write(`retention: ${retention.note}\n`);
      if (retention?.held) process.stdout.write(`retention: ${retention.held}\n`);
    });
}

import { joinLocation } from '../config/io/artifacts';
import { spawn } from 'node:child_process';
import { Command } from 'commander';
import { modules } from './modules';

export function reportCommand(): Command {
  return new Command('report')
    .description("Write a campaign's report.html (charts, flips, links to the Temporal UI) and summary.md, and print where they are")
    .argument('<id>', 'campaign id')
    .option('--open', 'open report.html in the default browser')
    .addHelpText('after', '\nExample:\n  roundhouse report support-tickets-20261129120000 --open')
    .action(async (id: string, opts: { open?: boolean }) => {
      const { cliContext, reportRoot } = modules.context();
      const { settings } = cliContext();
      const dir = joinLocation(reportRoot(settings), id);
      const written = await modules.report().rewriteCampaignReport(id, dir, {
        temporalUiUrl: process.env.ROUNDHOUSE_UI_URL ?? 'http://127.0.0.1:8233',
        namespace: settings.namespace,
      });
      process.stdout.write(`${written.html}\n${written.markdown}\n`);
      if (opts.open)
        spawn(process.platform === 'darwin' ? 'open' : 'xdg-open', [written.html], { detached: true, stdio: 'ignore' })
          .on('error', () => undefined)
          .unref();
    });
}

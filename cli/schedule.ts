import { Command, Option } from 'commander';
import { ConfigError } from '../config/rules/errors';
import type { OverlapName, ScheduleHealth } from '../workers/schedules';
import type * as Context from './context';
import { artifactRoot } from '../config/io/artifacts';
import { checkedOnWorker } from './campaign';
import { modules } from './modules';

async function withClient<T>(body: (c: Context.CliClient) => Promise<T>): Promise<T> {
  const { cliContext, cliClient } = modules.context();
  const { settings } = cliContext();
  const c = await cliClient(settings);
  try {
    return await body(c);
  } finally {
    await c.close();
  }
}

function notFound(err: unknown, id: string): never {
  if (err instanceof modules.temporalClient().ScheduleNotFoundError)
    throw new ConfigError(id, 'no schedule with this id (see `roundhouse schedule list`)');
  throw err;
}

export function scheduleCommand(): Command {
  const schedule = new Command('schedule').description('Scheduled retraining: Temporal Schedules that start campaigns from a spec');
  schedule
    .command('create')
    .description('Create (or update) a schedule that starts a campaign from a spec every interval or on a cron')
    .argument('<spec>', 'campaign spec')
    .option('--id <id>', 'schedule id (default: <name>-schedule)')
    .option('--every <interval>', "interval, e.g. '1h', '30 minutes', '1 day'")
    .option('--cron <expr...>', "cron expressions, e.g. '0 3 * * *'")
    .addOption(
      new Option('--overlap <policy>', 'what to do when the previous run is still going')
        .choices(['skip', 'buffer-one', 'buffer-all', 'cancel-other', 'allow-all'])
        .default('skip'),
    )
    .addHelpText(
      'after',
      "\nExamples:\n  roundhouse schedule create campaign.yaml --every 1d\n  roundhouse schedule create campaign.yaml --cron '0 3 * * *' --id nightly",
    )
    .action(async (specFile: string, opts: { id?: string; every?: string; cron?: string[]; overlap: OverlapName }) => {
      if (!opts.every && !opts.cron) throw new ConfigError('--every', 'give --every <interval> or --cron <expression>');
      const { cliContext, reportRoot, warnAbout } = modules.context();
      const { validateCampaignLocally, withLocalData } = modules.validate();
      const { settings } = cliContext();
      const given = modules.spec().loadCampaignSpec(specFile);
      const local = await withLocalData(given);
      warnAbout(validateCampaignLocally(local).warnings);
      const scheduleId = opts.id ?? `${given.name}-schedule`;
      await withClient(async ({ client }) => {
        // Each run checks the same before its first round; refused here, no schedule is made of a wrong spec.
        await checkedOnWorker(client, settings.taskQueue, given, scheduleId);
        // The schedule's runs train on this copy of the data (unless data.reread), wherever and whenever they run.
        const staged = await modules.campaignData().stageCampaignData(given, local, artifactRoot(process.env, settings.stateDir));
        await modules.schedules().upsertCampaignSchedule(client, {
          scheduleId,
          spec: staged,
          taskQueue: settings.taskQueue,
          reportRoot: reportRoot(settings),
          every: opts.every,
          cron: opts.cron,
          overlap: opts.overlap,
        });
        process.stdout.write(
          `schedule ${scheduleId}: starts ${staged.name} ${opts.every ? `every ${opts.every}` : `on ${opts.cron!.join(', ')}`} (overlap ${opts.overlap})\n`,
        );
      });
    });
  schedule
    .command('list')
    .description("List campaign schedules and their health: next and last run, the last run's outcome, skipped runs, the line's champion")
    .option('--json', 'print the schedules as JSON')
    .addHelpText('after', '\nExample:\n  roundhouse schedule list')
    .action(async (opts: { json?: boolean }) => {
      await withClient(async ({ client }) => {
        const schedules = (await modules.schedules().campaignSchedules(client)).map((s) => s.health);
        if (opts.json) return void process.stdout.write(`${JSON.stringify(schedules, null, 2)}\n`);
        // The others (the reaper's): one line each.
        const others: string[] = [];
        for await (const s of client.schedule.list())
          if (s.action?.workflowType !== 'campaignWorkflow')
            others.push(
              `${s.scheduleId}  ${s.state.paused ? 'paused' : 'active'}  next ${s.info.nextActionTimes[0]?.toISOString() ?? '–'}  ${s.state.note ?? ''}\n`,
            );
        const text = schedules.map(renderScheduleHealth).join('') + others.join('');
        process.stdout.write(text || 'no schedules\n');
      });
    });
  for (const [name, verb] of [
    ['pause', 'Pause'],
    ['unpause', 'Unpause'],
    ['delete', 'Delete'],
  ] as const) {
    schedule
      .command(name)
      .description(`${verb} a schedule`)
      .argument('<id>', 'schedule id')
      .addHelpText('after', `\nExample:\n  roundhouse schedule ${name} nightly`)
      .action(async (id: string) => {
        await withClient(async ({ client }) => {
          const handle = client.schedule.getHandle(id);
          await handle.describe().catch((err: unknown) => notFound(err, id));
          if (name === 'pause') await handle.pause('paused with roundhouse');
          else if (name === 'unpause') await handle.unpause('unpaused with roundhouse');
          else await handle.delete();
          process.stdout.write(`schedule ${id}: ${name === 'delete' ? 'deleted' : `${name}d`}\n`);
        });
      });
  }
  return schedule;
}

/** A schedule's health as a few lines of text (`schedule list`). */
export function renderScheduleHealth(h: ScheduleHealth): string {
  const lines = [`${h.scheduleId}  ${h.paused ? 'paused' : 'active'}  next ${h.next ?? '–'}`];
  lines.push(h.lastRun ? `  last run ${h.lastRun.workflowId} (scheduled ${h.lastRun.scheduledAt}): ${h.lastRun.status}` : '  no run yet');
  if (h.skipped > 0)
    lines.push(
      `  skipped ${h.skipped} run(s) while the previous one still ran${h.running.length ? ` (running: ${h.running.join(', ')})` : ''}`,
    );
  if (h.line) {
    const c = h.line.champion;
    lines.push(
      c
        ? `  line ${h.line.name}: champion ${c.checkpointId} (round ${c.round} of ${c.campaignId}), since ${c.promotedAt}, ${c.changes} change(s)`
        : `  line ${h.line.name}: no champion yet`,
    );
  }
  return `${lines.join('\n')}\n`;
}

import { Command, InvalidArgumentError } from 'commander';
import type * as TemporalClient from '@temporalio/client';
import { DIALECTS, type Dialect } from '../config/rules/dialects';
import { ConfigError } from '../config/rules/errors';
import type * as Context from './context';
import type * as Worker from '../workers/worker';
import { modules } from './modules';

function providerKinds(value: string): Dialect[] {
  const kinds = value
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  const bad = kinds.find((k) => !(DIALECTS as readonly string[]).includes(k));
  if (bad || kinds.length === 0) throw new InvalidArgumentError(`expected a comma-separated list of ${DIALECTS.join(', ')}`);
  return kinds as Dialect[];
}

interface ReaperFlags {
  reaper?: Dialect[] | false;
  reaperEvery: string;
  reapUntagged?: boolean;
}

/**
 * On by default: every worker brings the one reaper schedule up to date (its endpoints are merged, never replaced).
 * Another worker creating it at the same moment, or an identity that may not manage schedules, is said, not fatal.
 */
async function ensureReaper(
  client: TemporalClient.Client,
  taskQueue: string,
  opts: ReaperFlags,
  logger: Context.CliContext['logger'],
): Promise<void> {
  const providers = (opts.reaper || []).map((kind) => ({ kind, model: '' }));
  try {
    await modules
      .schedules()
      .ensureReaperSchedule(client, { taskQueue, providers, every: opts.reaperEvery, reapUntagged: opts.reapUntagged });
    logger.info({ providers: opts.reaper || [], every: opts.reaperEvery }, 'reaper schedule ensured');
  } catch (err) {
    if (!(err instanceof modules.temporalClient().ScheduleAlreadyRunning))
      logger.warn({ error: String(err) }, 'could not ensure the reaper schedule');
  }
}

export function workerCommand(): Command {
  return new Command('worker')
    .description('Run a Roundhouse worker against an existing Temporal server (TEMPORAL_ADDRESS); SIGTERM/SIGINT drain it gracefully')
    .option(
      '--reaper <providers>',
      "also scan these providers' default endpoints (e.g. local,together); the endpoints rounds used are always covered",
      providerKinds,
    )
    .option('--no-reaper', 'do not create or update the reaper schedule (another deployment runs it)')
    .option('--reaper-every <interval>', 'how often the reaper runs', '1 minute')
    .option('--reap-untagged', 'reap untagged resources no round records once 90 min old (only on accounts Roundhouse alone uses)')
    .addHelpText(
      'after',
      '\nExamples:\n  TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse worker\n  TEMPORAL_ADDRESS=temporal:7233 ROUNDHOUSE_METRICS_ADDRESS=0.0.0.0:9464 roundhouse worker --reaper together\n  roundhouse worker --no-reaper',
    )
    .action(async (opts: ReaperFlags) => {
      const { settings, logger } = modules.context().cliContext({ serveMetrics: true });
      if (!settings.address)
        throw new ConfigError('TEMPORAL_ADDRESS', 'is required for `roundhouse worker` (use `roundhouse up` for a local server)');
      let stopRequestedAt: number | undefined;
      const onSignal = (signal: NodeJS.Signals) => {
        stopRequestedAt ??= Date.now();
        logger.info(
          { signal, graceMs: settings.tuning.shutdownGraceMs },
          'shutdown requested: no new tasks; training segments return their cursor',
        );
      };
      process.on('SIGTERM', onSignal).on('SIGINT', onSignal);
      let stack: Worker.AssembledWorker | undefined;
      try {
        stack = await modules.worker().assembleWorker(settings);
        if (opts.reaper !== false) await ensureReaper(stack.client, settings.taskQueue, opts, logger);
        logger.info(
          {
            address: settings.address,
            namespace: settings.namespace,
            taskQueue: settings.taskQueue,
            metrics: settings.metricsAddress ? `http://${settings.metricsAddress}/metrics` : 'off',
            encryption: settings.encryption ? `AES-256-GCM, key ${settings.encryption.currentKeyId}` : 'off',
          },
          'worker started',
        );
        await stack.worker.run(); // returns after SIGINT/SIGTERM and a graceful drain
        logger.info({ drainMs: stopRequestedAt === undefined ? undefined : Date.now() - stopRequestedAt }, 'worker stopped');
      } finally {
        process.off('SIGTERM', onSignal).off('SIGINT', onSignal);
        await stack?.close();
      }
    });
}

import { Command, InvalidArgumentError } from 'commander';
import type { Dialect } from '../config/rules/dialects';
import { modules } from './modules';

export function reapCommand(): Command {
  return new Command('reap')
    .description('Run the reaper once: find trainers whose owning workflow is gone; dry run unless --apply')
    .option('--apply', 'deactivate them (default: only report)')
    .option(
      '--reap-untagged',
      'also take untagged resources no round records, once older than --untagged-grace (accounts Roundhouse alone uses)',
    )
    .option(
      '--untagged-grace <minutes>',
      'how old an untagged resource must be before --reap-untagged takes it',
      (v) => {
        const n = Number(v);
        if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('--untagged-grace takes minutes');
        return n;
      },
      90,
    )
    .option(
      '--provider <kind>',
      'local, together, baseten or tinker (repeatable)',
      (v: string, all: string[]) => [...all, v],
      [] as string[],
    )
    .option('--base-url <url>', "provider base URL (default: the provider's own, or the local emulator)")
    .addHelpText(
      'after',
      '\nExamples:\n  roundhouse reap                      # what would be reaped on the local emulator\n  roundhouse reap --apply --provider together',
    )
    .action(async (opts: { apply?: boolean; reapUntagged?: boolean; untaggedGrace: number; provider: string[]; baseUrl?: string }) => {
      const { cliClient, cliContext } = modules.context();
      const { settings } = cliContext();
      const kinds = (opts.provider.length ? opts.provider : ['local']) as Dialect[];
      const { client, close } = await cliClient(settings);
      try {
        const result = await modules.reap().reapOnce(client, {
          stateDir: settings.stateDir,
          kinds,
          baseUrl: opts.baseUrl,
          untaggedGraceMinutes: opts.untaggedGrace,
          reapUntagged: opts.reapUntagged,
          dryRun: !opts.apply,
          taskQueue: settings.taskQueue,
        });
        for (const r of result.reaped)
          process.stdout.write(
            `${r.action}  ${r.provider}  ${r.resourceId}  owner ${r.owner ?? 'unknown'} (${r.ownerStatus}): ${r.reason ?? ''}\n`,
          );
        for (const r of result.kept)
          process.stdout.write(
            `kept  ${r.provider}  ${r.resourceId}  owner ${r.owner ?? 'unknown'} (${r.ownerStatus}): ${r.reason ?? ''}\n`,
          );
        for (const u of result.unchecked)
          process.stdout.write(`unchecked  ${u.provider}${u.resourceId ? `  ${u.resourceId}` : ''}: ${u.error}\n`);
        process.stdout.write(
          `${result.checked} active resources checked on ${result.endpoints.length} endpoint(s), ${result.unchecked.length} could not be checked, ${result.reaped.length} ${opts.apply ? 'deactivated' : 'would be deactivated (dry run; --apply to act)'}\n`,
        );
      } finally {
        await close();
      }
    });
}

import type { Client } from '@temporalio/client';
import type { ProviderSpec } from '../config/io/spec';
import { abilitiesOf } from '../config/rules/dialects';
import { reapOrphans, type ReaperResult } from '../activities/reaper';
import { ProviderRegistry } from './providers';

export interface ReapOnceOptions {
  /** The worker's state dir: where an embedded emulator wrote its URL (`local` without a base URL). */
  stateDir: string;
  kinds: ProviderSpec['kind'][];
  baseUrl?: string;
  untaggedGraceMinutes: number;
  dryRun: boolean;
  /** The deployment whose rounds' records are read. */
  taskQueue: string;
  reapUntagged?: boolean;
}

/**
 * One reaper pass in this process, outside any workflow (`roundhouse reap`): the reaper activity's own code, with
 * providers built from this process's environment (API keys never leave it).
 */
export async function reapOnce(client: Client, options: ReapOnceOptions): Promise<ReaperResult> {
  const providers = new ProviderRegistry({ stateDir: options.stateDir });
  try {
    const localUrl = options.kinds.some((kind) => abilitiesOf(kind).embedded)
      ? (options.baseUrl ?? (await providers.localEmulatorUrl({ start: false })))
      : undefined;
    return await reapOrphans(
      providers,
      client,
      {
        providers: options.kinds.map((kind) => ({ kind, baseUrl: abilitiesOf(kind).embedded ? localUrl : options.baseUrl, model: '' })),
        graceSeconds: options.untaggedGraceMinutes * 60,
        untaggedGraceMinutes: options.untaggedGraceMinutes,
        dryRun: options.dryRun,
        reapUntagged: options.reapUntagged,
      },
      { taskQueue: options.taskQueue },
    );
  } finally {
    await providers.close();
  }
}

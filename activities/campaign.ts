import { joinLocation, sha256, storeFor } from '../config/io/artifacts';
import { permutation } from '../config/rules/schedule';
import { DataValidationError } from '../config/rules/errors';
import { Context } from '@temporalio/activity';
import { atBoundary, keepingAlive } from './failures';
import { nextDataOnPython } from './python';
import { trackCampaign, trackingTarget } from './tracking';
import type { CampaignSpec } from '../config/io/spec';
import { writeCampaignReports } from './report';
import { readJson, writeJsonAtomic } from './files';
import type { ActivityDeps } from './deps';
import { applyRetention } from './retention';
import type { RetentionRule } from '../config/rules/retention';
import type { ProviderSpec } from '../config/io/spec';
import type { NextDataInput, NextDataPolicy, NextTrainingData } from '../workflows/campaign/contract';
import { roundFiles } from '../config/rules/round-files';

/**
 * Next-data policies, by name:
 * - `mistakes`: the pool rows the last round got wrong, plus `replayShare` of the rows it got right (seeded);
 *   the whole pool when there were no mistakes.
 * - `all`: the whole pool, every round.
 * - `static`: the same training file, every round.
 */
export const NEXT_DATA_POLICIES: Record<
  NextDataPolicy,
  (input: NextDataInput, pool: string[]) => Promise<{ lines: string[]; mistakes?: number } | 'unchanged'>
> = {
  static: async () => 'unchanged',
  all: async (_input, pool) => ({ lines: pool.filter((l) => l.trim() !== '') }),
  python: async (input) => {
    if (!input.python) throw new Error('the python policy needs rounds.nextData.name and taskQueue');
    // The policy's rows, written once by the Python side (a retry reuses them); round N's checks validate each row.
    const output = roundFiles(input.outDir, input.round, joinLocation).pythonData;
    await nextDataOnPython(input.python, `python:${input.campaignId}/r${input.round}/next-data`, {
      pool: input.pool,
      results: input.poolEvaluationsPath ?? null,
      output,
      round: input.round,
    });
    const body = await storeFor(output).read(output);
    if (body === undefined) throw new Error(`${output}: the data policy's rows are missing`);
    return {
      lines: body
        .toString('utf8')
        .split('\n')
        .filter((l) => l.trim() !== ''),
    };
  },
  mistakes: async (input, pool) => {
    const lines = pool.filter((l) => l.trim() !== '');
    if (!input.poolEvaluationsPath) throw new Error('the mistakes policy needs the last round to score the pool');
    const scored = await readJson<{ line: number; match: boolean }[]>(input.poolEvaluationsPath);
    if (!scored) throw new Error(`${input.poolEvaluationsPath}: the last round's pool evaluations are missing`);
    const wrong = scored.filter((e) => !e.match).map((e) => e.line);
    const right = scored.filter((e) => e.match).map((e) => e.line);
    if (wrong.length === 0) return { lines, mistakes: 0 };
    const order = permutation(right.length, input.seed);
    const replay = order.slice(0, Math.round(input.replayShare * right.length)).map((i) => right[i]!);
    const chosen = [...wrong, ...replay].sort((a, b) => a - b);
    return { lines: chosen.map((l) => pool[l - 1]!), mistakes: wrong.length };
  },
};

/** The pool's lines, as in the file (1-based line numbers index it). */
async function poolText(pool: string): Promise<{ lines: string[]; sha256: string }> {
  const body = await storeFor(pool).read(pool);
  if (body === undefined) throw new DataValidationError([`${pool}: no such file`]);
  return { lines: body.toString('utf8').split('\n'), sha256: sha256(body) };
}

export function createCampaignActivities(deps: ActivityDeps) {
  return {
    /** Writes the next round's training set (a new object, atomically) and returns its reference and sha256. */
    async selectNextTrainingData(input: NextDataInput): Promise<NextTrainingData> {
      return keepingAlive(() =>
        atBoundary(async () => {
          const pool = await poolText(input.pool);
          const chosen = await NEXT_DATA_POLICIES[input.policy](input, pool.lines);
          if (chosen === 'unchanged')
            return { path: input.pool, sha256: pool.sha256, rows: pool.lines.filter((l) => l.trim() !== '').length };
          if (chosen.lines.length === 0)
            throw new DataValidationError([`${input.pool}: the ${input.policy} policy chose no rows for round ${input.round}`]);
          const file = roundFiles(input.outDir, input.round, joinLocation).trainData;
          const body = `${chosen.lines.join('\n')}\n`;
          await storeFor(file).write(file, body, 'application/jsonl');
          return { path: file, sha256: sha256(body), rows: chosen.lines.length, mistakes: chosen.mistakes };
        }),
      );
    },

    /** campaign.json, then report.html and summary.md from it and the round reports. */
    async writeCampaignSummary(input: {
      path: string;
      summary: unknown;
      track?: Pick<CampaignSpec, 'name' | 'tracking'>;
      /** The spec's retention, and the checkpoints the campaign still needs (absent in summaries recorded before). */
      retention?: { rule: RetentionRule; provider: ProviderSpec; own: string[] };
    }): Promise<string> {
      return keepingAlive(async () => {
        await writeJsonAtomic(input.path, input.summary);
        const dir = input.path.slice(0, input.path.lastIndexOf('/'));
        await writeCampaignReports(dir, {
          temporalUiUrl: process.env.ROUNDHOUSE_UI_URL ?? 'http://127.0.0.1:8233',
          namespace: Context.current().info.workflowNamespace ?? 'default',
        });
        // Only a tracked campaign reads its reports back (for the tracker's artifacts).
        if (input.track && trackingTarget(input.track)) {
          const summary = input.summary as Parameters<typeof trackCampaign>[2] & { campaignId: string };
          const artifacts = [];
          for (const [name, contentType] of [
            ['campaign.json', 'application/json'],
            ['report.html', 'text/html'],
            ['summary.md', 'text/markdown'],
          ] as const) {
            const body = await storeFor(dir).read(joinLocation(dir, name));
            if (body) artifacts.push({ name, body, contentType });
          }
          await trackCampaign(input.track, summary.campaignId, summary, artifacts);
        }
        if (input.retention) {
          const { rule, provider, own } = input.retention;
          await applyRetention({
            campaignDir: dir,
            rule,
            own,
            client: Context.current().client,
            witness: Context.current().info.workflowExecution,
            provider: await deps.providerFor(provider),
          });
        }
        return input.path;
      });
    },
  };
}

export type CampaignActivities = ReturnType<typeof createCampaignActivities>;

import fs from 'node:fs';
import path from 'node:path';
import { permutation } from '../config/schedule';
import { DataValidationError } from '../config/errors';
import { sha256File } from './data';
import { Context } from '@temporalio/activity';
import { atBoundary } from './failures';
import { writeCampaignReports } from './report';
import { writeJsonAtomic } from './files';

export type NextDataPolicy = 'mistakes' | 'all' | 'static';

export interface NextDataInput {
  campaignId: string;
  /** The round the data is for. */
  round: number;
  policy: NextDataPolicy;
  replayShare: number;
  seed: number;
  /** The campaign's training pool (`data.train`). */
  pool: string;
  /** The last round's scored pool rows (`mistakes` policy). */
  poolEvaluationsPath?: string;
  outDir: string;
}

export interface NextTrainingData {
  path: string;
  sha256: string;
  rows: number;
  mistakes?: number;
}

/**
 * Next-data policies, by name:
 * - `mistakes`: the pool rows the last round got wrong, plus `replayShare` of the rows it got right (seeded);
 *   the whole pool when there were no mistakes.
 * - `all`: the whole pool, every round.
 * - `static`: the same training file, every round.
 */
export const NEXT_DATA_POLICIES: Record<NextDataPolicy, (input: NextDataInput) => { lines: string[]; mistakes?: number } | 'unchanged'> = {
  static: () => 'unchanged',
  all: (input) => ({ lines: poolLines(input.pool) }),
  mistakes: (input) => {
    const lines = poolLines(input.pool);
    if (!input.poolEvaluationsPath) throw new Error('the mistakes policy needs the last round to score the pool');
    const scored = JSON.parse(fs.readFileSync(input.poolEvaluationsPath, 'utf8')) as { line: number; match: boolean }[];
    const wrong = scored.filter((e) => !e.match).map((e) => e.line);
    const right = scored.filter((e) => e.match).map((e) => e.line);
    if (wrong.length === 0) return { lines, mistakes: 0 };
    const order = permutation(right.length, input.seed);
    const replay = order.slice(0, Math.round(input.replayShare * right.length)).map((i) => right[i]!);
    const chosen = [...wrong, ...replay].sort((a, b) => a - b);
    const text = fs.readFileSync(input.pool, 'utf8').split('\n');
    return { lines: chosen.map((l) => text[l - 1]!), mistakes: wrong.length };
  },
};

function poolLines(pool: string): string[] {
  return fs
    .readFileSync(pool, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '');
}

export function createCampaignActivities() {
  return {
    /** Writes the next round's training set (a new file, atomically) and returns its reference and sha256. */
    async selectNextTrainingData(input: NextDataInput): Promise<NextTrainingData> {
      return atBoundary(async () => {
        const chosen = NEXT_DATA_POLICIES[input.policy](input);
        if (chosen === 'unchanged') return { path: input.pool, sha256: sha256File(input.pool), rows: poolLines(input.pool).length };
        if (chosen.lines.length === 0)
          throw new DataValidationError([`${input.pool}: the ${input.policy} policy chose no rows for round ${input.round}`]);
        const file = path.join(input.outDir, `round-${input.round}.train.jsonl`);
        fs.mkdirSync(input.outDir, { recursive: true });
        const partial = `${file}.${process.pid}.partial`;
        fs.writeFileSync(partial, `${chosen.lines.join('\n')}\n`);
        fs.renameSync(partial, file);
        return { path: file, sha256: sha256File(file), rows: chosen.lines.length, mistakes: chosen.mistakes };
      });
    },

    /** campaign.json, then report.html and summary.md from it and the round reports. */
    async writeCampaignSummary(input: { path: string; summary: unknown }): Promise<string> {
      writeJsonAtomic(input.path, input.summary);
      writeCampaignReports(path.dirname(input.path), {
        temporalUiUrl: process.env.ROUNDHOUSE_UI_URL ?? 'http://127.0.0.1:8233',
        namespace: Context.current().info.workflowNamespace ?? 'default',
      });
      return input.path;
    },
  };
}

export type CampaignActivities = ReturnType<typeof createCampaignActivities>;

import { joinLocation } from '../config/io/artifacts';
import { keepingAlive } from './failures';
import { readJson, writeJsonAtomic } from './files';
import type {
  ChampionRecord,
  PromotionApproval,
  PromotionDecision,
  PromotionFigures,
  PromotionJudgeInput,
  PromotionRecordInput,
} from '../workflows/promotion-contract';
import { registerChampion } from './tracking';
import type { CampaignSpec } from '../config/io/spec';

type Tracked = Pick<CampaignSpec, 'name' | 'tracking'>;

/**
 * Champion and challenger (`promotion`): a model line's champion is one JSON record in the artifact store
 * (`<root>/lines/<line>/champion.json`, written atomically): its checkpoint, the figures it was promoted on (with the
 * sha256 of the rows they were measured on) and the history of every change. Each decision is written beside it
 * (`decisions/<campaign>.json`), promoted or not.
 */

/** Where a campaign store's lines live: beside `campaigns/` (or inside the report root when it is named otherwise). */
export function linesRoot(reportRoot: string): string {
  const trimmed = reportRoot.replace(/\/+$/, '');
  return trimmed.endsWith('/campaigns') ? `${trimmed.slice(0, -'/campaigns'.length)}/lines` : joinLocation(trimmed, '_lines');
}

export function championPath(reportRoot: string, line: string): string {
  return joinLocation(linesRoot(reportRoot), line, 'champion.json');
}

interface ReportFigures {
  accuracy?: number | null;
  eval_sha256?: string;
  evaluations?: unknown[];
  test?: { accuracy: number; rows: number; sha256: string | null } | null;
}

/** A round's figures on the set promotion compares on, from its report. */
async function figuresOf(reportPath: string, on: 'test' | 'eval'): Promise<PromotionFigures> {
  const report = await readJson<ReportFigures>(reportPath);
  if (!report) throw new Error(`${reportPath}: no round report`);
  if (on === 'test') {
    if (!report.test?.sha256) throw new Error(`${reportPath}: the round was not scored on a test set`);
    return { on, accuracy: report.test.accuracy, rows: report.test.rows, sha256: report.test.sha256, reportPath };
  }
  if (typeof report.accuracy !== 'number' || !report.eval_sha256) throw new Error(`${reportPath}: the round has no eval accuracy`);
  return { on, accuracy: report.accuracy, rows: report.evaluations?.length ?? 0, sha256: report.eval_sha256, reportPath };
}

/** The verdict on a challenger against a champion measured on the same rows. */
export function verdictOf(
  challenger: PromotionFigures,
  champion: PromotionFigures | undefined,
  minGain: number,
): { verdict: 'promote' | 'keep'; reason: string } {
  const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
  if (!champion) return { verdict: 'promote', reason: 'no champion yet: the first result becomes it' };
  const gain = challenger.accuracy - champion.accuracy;
  const beats = gain > 0 && gain >= minGain - 1e-12;
  const versus = `${pct(challenger.accuracy)} against the champion's ${pct(champion.accuracy)} on the same ${challenger.rows} ${challenger.on} rows`;
  return beats
    ? { verdict: 'promote', reason: `${versus}: a gain of ${pct(gain)} (at least ${pct(minGain)} needed)` }
    : { verdict: 'keep', reason: `${versus}: a gain of ${pct(gain)}, short of ${minGain > 0 ? pct(minGain) : 'any gain'}` };
}

export function createPromotionActivities() {
  return {
    /**
     * The challenger against the line's champion, on the same rows: `rescore` when the champion's figures are for
     * other data (and no re-scoring of it is given yet). Reads only; decides nothing durable.
     */
    async judgePromotion(input: PromotionJudgeInput): Promise<PromotionDecision> {
      return keepingAlive(async () => {
        const { rule } = input;
        const challenger = await figuresOf(input.challenger.reportPath, rule.on);
        const record = await readJson<ChampionRecord>(championPath(input.reportRoot, input.line));
        const base = {
          decisionId: input.decisionId,
          line: input.line,
          on: rule.on,
          minGain: rule.minGain,
          challenger: { ...input.challenger, figures: challenger },
        };
        if (!record) return { ...base, ...verdictOf(challenger, undefined, rule.minGain) };
        const rescored = input.rescoredChampion ? await figuresOf(input.rescoredChampion.reportPath, rule.on) : undefined;
        const figures = rescored ?? record.figures;
        const champion = {
          checkpointId: record.checkpointId,
          campaignId: record.campaignId,
          round: record.round,
          figures,
          ...(rescored ? { rescored: true } : {}),
        };
        if (figures.on !== rule.on || figures.sha256 !== challenger.sha256)
          return {
            ...base,
            champion,
            verdict: 'rescore',
            reason: `the champion's figures are for other ${rule.on} rows (sha256 ${figures.sha256.slice(0, 12)}…, the challenger's ${challenger.sha256.slice(0, 12)}…)`,
          };
        return { ...base, champion, ...verdictOf(challenger, figures, rule.minGain) };
      });
    },

    /**
     * Writes the decision, and on a promotion the line's new champion record (atomically, once per decision: a
     * retry, or the same decision after a crash, finds its own record and changes nothing) and, with MLflow
     * configured, the registered model version and the `champion` alias.
     */
    async recordPromotion(input: PromotionRecordInput): Promise<ChampionRecord | undefined> {
      return keepingAlive(async () => {
        const { decision, approval } = input;
        const dir = linesRoot(input.reportRoot);
        const promoted = decision.verdict === 'promote' && (approval === undefined || approval.approved);
        await writeJsonAtomic(joinLocation(dir, decision.line, 'decisions', `${safeName(decision.decisionId)}.json`), {
          ...decision,
          ...(approval ? { approval } : {}),
          promoted,
          at: new Date(input.atMs).toISOString(),
        });
        if (!promoted) return undefined;
        const file = championPath(input.reportRoot, decision.line);
        const previous = await readJson<ChampionRecord>(file);
        let record = previous;
        if (previous?.decisionId !== decision.decisionId) {
          const c = decision.challenger;
          record = {
            line: decision.line,
            checkpointId: c.checkpointId,
            campaignId: c.campaignId,
            round: c.round,
            figures: c.figures,
            promotedAt: new Date(input.atMs).toISOString(),
            decisionId: decision.decisionId,
            history: [
              ...(previous?.history ?? []),
              {
                decisionId: decision.decisionId,
                checkpointId: c.checkpointId,
                campaignId: c.campaignId,
                round: c.round,
                at: new Date(input.atMs).toISOString(),
                figures: c.figures,
                reason: decision.reason,
                ...(previous ? { replaced: previous.checkpointId } : {}),
                ...(approval ? { approvedBy: approval.by } : {}),
              },
            ],
          };
          await writeJsonAtomic(file, record);
        }
        return record;
      });
    },

    /**
     * The line's champion in MLflow's Model Registry (when the campaign is tracked): its version (one per decision)
     * and the `champion` alias, noted in the champion record. Only for the decision that made the champion.
     */
    async registerChampion(input: {
      reportRoot: string;
      line: string;
      decisionId: string;
      track: Tracked;
    }): Promise<ChampionRecord['registry']> {
      return keepingAlive(async () => {
        const file = championPath(input.reportRoot, input.line);
        const record = await readJson<ChampionRecord>(file);
        if (!record || record.decisionId !== input.decisionId) return undefined; // a later decision replaced it
        const registry = await registerChampion(input.track, record);
        if (registry && (record.registry?.version !== registry.version || record.registry?.name !== registry.name))
          await writeJsonAtomic(file, { ...record, registry });
        return registry;
      });
    },
  };
}

/** A decision id as a file name. */
function safeName(id: string): string {
  return id.replace(/[^A-Za-z0-9._-]+/g, '_');
}

export type PromotionActivities = ReturnType<typeof createPromotionActivities>;
export type { PromotionApproval };

import { createJson, joinLocation, storeFor } from '../config/io/artifacts';
import { atBoundary, keepingAlive } from './failures';
import { DataValidationError } from '../config/rules/errors';
import { readJson, writeJsonAtomic } from './files';
import type {
  ChampionRecord,
  PromotionApproval,
  PromotionDecision,
  PromotionFigures,
  PromotionJudgeInput,
  PromotionMeasure,
  PromotionRecordInput,
  PromotionRecordResult,
} from '../workflows/campaign/promotion-contract';
import { pointChampionAlias, registerChampion } from './tracking';
import type { CampaignSpec } from '../config/io/spec';
import { readRoundReport } from '../config/io/round-report';

type Tracked = Pick<CampaignSpec, 'name' | 'tracking'>;

/**
 * Champion and challenger (`promotion`): a model line's champion is a numbered record in the artifact store
 * (`<root>/lines/<line>/champions/<n>.json`, the highest number wins): its checkpoint, the figures it was promoted on
 * (with the sha256 of the rows, the scorer, the sampling and the base model they were measured with) and the history
 * of every change. Each record is created only where none is yet (a hard link on disk, `If-None-Match: *` on S3), so
 * of two campaigns that judged against champion n only one records n+1; the other finds the champion changed and
 * judges again. Each decision is written beside it (`decisions/<campaign>.json`), promoted or not.
 */

/** Where a campaign store's lines live: beside `campaigns/` (or inside the report root when it is named otherwise). */
export function linesRoot(reportRoot: string): string {
  const trimmed = reportRoot.replace(/\/+$/, '');
  return trimmed.endsWith('/campaigns') ? `${trimmed.slice(0, -'/campaigns'.length)}/lines` : joinLocation(trimmed, '_lines');
}

/** The record of a line's champion number `version` (1, 2, …). */
export function championPath(reportRoot: string, line: string, version: number): string {
  return joinLocation(linesRoot(reportRoot), line, 'champions', `${String(version).padStart(6, '0')}.json`);
}

/** Before numbered records, the one record a line had: read as champion 0 until a promotion records champion 1. */
function unnumberedChampionPath(reportRoot: string, line: string): string {
  return joinLocation(linesRoot(reportRoot), line, 'champion.json');
}

/** The line's champion: its newest numbered record (or the unnumbered one of an older line), with its number. */
export async function readChampion(reportRoot: string, line: string): Promise<{ record: ChampionRecord; version: number } | undefined> {
  const dir = joinLocation(linesRoot(reportRoot), line, 'champions');
  const versions = (await storeFor(dir).list(dir))
    .map((location) => /(\d{6,})\.json$/.exec(location)?.[1])
    .filter((v): v is string => v !== undefined)
    .map(Number);
  if (versions.length) {
    const version = Math.max(...versions);
    const record = await readChampionRecord(championPath(reportRoot, line, version));
    if (record) return { record, version };
  }
  const unnumbered = await readChampionRecord(unnumberedChampionPath(reportRoot, line));
  return unnumbered ? { record: unnumbered, version: 0 } : undefined;
}

/** A champion record; one that is not JSON is refused by name (a person must repair it; a retry cannot). */
async function readChampionRecord(location: string): Promise<ChampionRecord | undefined> {
  try {
    return await readJson<ChampionRecord>(location);
  } catch (err) {
    if (err instanceof SyntaxError)
      throw new DataValidationError([`${location}: the line's champion record is not JSON (${err.message}): repair or remove it`]);
    throw err;
  }
}

/** Whether two figures were measured alike (scorer and sampling; their rows are compared apart). */
function measuredAlike(a: PromotionMeasure | undefined, b: PromotionMeasure): boolean {
  return a !== undefined && canonical(a.scorer) === canonical(b.scorer) && canonical(a.sampling) === canonical(b.sampling);
}

/** JSON with sorted keys: two settings objects are the same when their canonical texts are. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([x], [y]) => x.localeCompare(y)))
      : v,
  );
}

/** A round's figures on the set promotion compares on, from its report. */
async function figuresOf(reportPath: string, on: 'test' | 'eval', measure: PromotionMeasure): Promise<PromotionFigures> {
  const report = await readRoundReport(reportPath);
  if (!report) throw new Error(`${reportPath}: no round report`);
  if (on === 'test') {
    if (!report.test?.sha256) throw new Error(`${reportPath}: the round was not scored on a test set`);
    return { on, accuracy: report.test.accuracy, rows: report.test.rows, sha256: report.test.sha256, reportPath, measure };
  }
  if (typeof report.accuracy !== 'number' || !report.eval_sha256) throw new Error(`${reportPath}: the round has no eval accuracy`);
  return { on, accuracy: report.accuracy, rows: report.evaluations.length, sha256: report.eval_sha256, reportPath, measure };
}

/** The base model a champion was trained on: recorded with its figures, or (an older record) in its round report. */
async function baseModelOf(record: ChampionRecord): Promise<string | undefined> {
  if (record.figures.measure) return record.figures.measure.baseModel;
  return (await readRoundReport(record.figures.reportPath).catch(() => undefined))?.base_model;
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
     * The challenger against the line's champion, like with like: `rescore` when the champion's figures are for other
     * rows, another scorer or other sampling (and no re-scoring of it is given yet); a champion on another base model
     * cannot be re-scored, so it is retired by this decision and the challenger judged alone. Reads only.
     */
    async judgePromotion(input: PromotionJudgeInput): Promise<PromotionDecision> {
      return onBoundary(async () => {
        const { rule, measure } = input;
        const challenger = await figuresOf(input.challenger.reportPath, rule.on, measure);
        const current = await readChampion(input.reportRoot, input.line);
        const base = {
          decisionId: input.decisionId,
          line: input.line,
          on: rule.on,
          minGain: rule.minGain,
          challenger: { ...input.challenger, figures: challenger },
          ...(current ? { championVersion: current.version } : {}),
        };
        if (!current) return { ...base, ...verdictOf(challenger, undefined, rule.minGain) };
        const { record } = current;
        const who = { checkpointId: record.checkpointId, campaignId: record.campaignId, round: record.round };
        const championBase = await baseModelOf(record);
        if (championBase !== undefined && championBase !== measure.baseModel) {
          const retired = `the champion (${record.checkpointId}) is a ${championBase} adapter and cannot be scored as ${measure.baseModel}: it is retired, and the challenger is judged alone`;
          return { ...base, champion: { ...who, figures: record.figures, retired }, verdict: 'promote', reason: retired };
        }
        const rescored = input.rescoredChampion ? await figuresOf(input.rescoredChampion.reportPath, rule.on, measure) : undefined;
        const figures = rescored ?? record.figures;
        const champion = { ...who, figures, ...(rescored ? { rescored: true } : {}) };
        if (figures.on !== rule.on || figures.sha256 !== challenger.sha256)
          return {
            ...base,
            champion,
            verdict: 'rescore',
            reason: `the champion's figures are for other ${rule.on} rows (sha256 ${figures.sha256.slice(0, 12)}…, the challenger's ${challenger.sha256.slice(0, 12)}…)`,
          };
        if (!measuredAlike(figures.measure, measure))
          return {
            ...base,
            champion,
            verdict: 'rescore',
            reason: `the champion's figures were measured with another scorer or other sampling (${figures.measure ? canonical({ scorer: figures.measure.scorer, sampling: figures.measure.sampling }) : 'not recorded'})`,
          };
        return { ...base, champion, ...verdictOf(challenger, figures, rule.minGain) };
      });
    },

    /**
     * Writes the decision, and on a promotion the line's next champion record, created only if the champion is still
     * the one judged against: when it changed since the judgement, nothing is written and `changedSince` says so (the
     * campaign judges again). Once per decision: a retry, or the same decision after a crash, finds its own record.
     */
    async recordPromotion(input: PromotionRecordInput): Promise<PromotionRecordResult> {
      return onBoundary(async () => {
        const { decision, approval } = input;
        const promoted = decision.verdict === 'promote' && (approval === undefined || approval.approved);
        const current = await readChampion(input.reportRoot, decision.line);
        const previous = current?.record;
        if (promoted && previous?.decisionId !== decision.decisionId) {
          const version = (current?.version ?? 0) + 1;
          if (current?.version !== decision.championVersion) return { changedSince: changeOf(decision, current) };
          const c = decision.challenger;
          const at = new Date(input.atMs).toISOString();
          const record: ChampionRecord = {
            line: decision.line,
            version,
            checkpointId: c.checkpointId,
            campaignId: c.campaignId,
            round: c.round,
            figures: c.figures,
            promotedAt: at,
            decisionId: decision.decisionId,
            history: [
              ...(previous?.history ?? []),
              {
                decisionId: decision.decisionId,
                checkpointId: c.checkpointId,
                campaignId: c.campaignId,
                round: c.round,
                at,
                figures: c.figures,
                reason: decision.reason,
                ...(previous ? { replaced: previous.checkpointId } : {}),
                ...(decision.champion?.retired ? { retired: decision.champion.retired } : {}),
                ...(approval ? { approvedBy: approval.by } : {}),
              },
            ],
          };
          if (!(await createJson(championPath(input.reportRoot, decision.line, version), record)))
            return { changedSince: changeOf(decision, await readChampion(input.reportRoot, decision.line)) };
        }
        await writeJsonAtomic(
          joinLocation(linesRoot(input.reportRoot), decision.line, 'decisions', `${safeName(decision.decisionId)}.json`),
          {
            ...decision,
            ...(approval ? { approval } : {}),
            promoted,
            at: new Date(input.atMs).toISOString(),
          },
        );
        return promoted ? (await readChampion(input.reportRoot, decision.line))?.record : undefined;
      });
    },

    /**
     * The line's champion in MLflow's Model Registry (when the campaign is tracked): its version (one per decision)
     * and the `champion` alias, noted in the champion record. Only for the decision that made the champion; and when
     * another campaign recorded a newer champion meanwhile, the alias is left on (or moved back to) that one's version.
     */
    async registerChampion(input: {
      reportRoot: string;
      line: string;
      decisionId: string;
      track: Tracked;
    }): Promise<ChampionRecord['registry']> {
      return onBoundary(async () => {
        const current = await readChampion(input.reportRoot, input.line);
        if (!current || current.record.decisionId !== input.decisionId) return undefined; // a later decision replaced it
        const { record, version } = current;
        const registry = await registerChampion(input.track, record);
        if (registry && (record.registry?.version !== registry.version || record.registry?.name !== registry.name))
          await writeJsonAtomic(championPath(input.reportRoot, input.line, version), { ...record, registry });
        // A champion recorded after the check above: the alias is its version's, once that version exists.
        const newest = await readChampion(input.reportRoot, input.line);
        if (registry && newest && newest.record.decisionId !== input.decisionId)
          await pointChampionAlias(input.track, input.line, newest.record.decisionId);
        return registry;
      });
    },
  };
}

/** Heartbeating, with errors translated at the boundary (bad input is not retried). */
function onBoundary<T>(body: () => Promise<T>): Promise<T> {
  return atBoundary(() => keepingAlive(body));
}

/** Why a recorded decision must be judged again: the champion it was judged against is no longer the line's. */
function changeOf(decision: PromotionDecision, now: { record: ChampionRecord; version: number } | undefined): string {
  const then = decision.champion ? `${decision.champion.checkpointId} (champion ${decision.championVersion})` : 'no champion';
  return now
    ? `the line's champion changed since the judgement: ${then} then, ${now.record.checkpointId} (champion ${now.version}, by ${now.record.campaignId}) now`
    : `the line's champion changed since the judgement: ${then} then, none now`;
}

/** A decision id as a file name. */
function safeName(id: string): string {
  return id.replace(/[^A-Za-z0-9._-]+/g, '_');
}

export type PromotionActivities = ReturnType<typeof createPromotionActivities>;
export type { PromotionApproval };

import { Context } from '@temporalio/activity';
import { descriptorOf } from '../config/rules/round-kinds';
import { joinLocation } from '../config/io/artifacts';
import { learningRateAt } from '../config/rules/schedule';
import { maskSecrets } from '../config/io/secrets';
import type { MlflowClient, MlflowMetric } from '../providers/mlflow/client';
import type { RoundSpec } from '../workflows/round/contract';
import { readJson, writeJsonAtomic } from './files';
import type { Rollback } from '../config/rules/lineage';
import { lossPerTokenOf, readStepRecords, type StepRecord } from './step-records';
import { metricOf, stageFacts, type GatedRound, type ShownStage } from '../config/rules/stages';
import { stepsFolder } from '../config/rules/round-files';
import type { RoundReportFields } from '../config/io/round-report';
import type { SweepRecord } from '../workflows/sweep/record';
import {
  campaignRun,
  clientFor,
  experimentOf,
  FINAL_STATUS,
  roundRun,
  specParams,
  stageRun,
  trackingTarget,
  type RoundTracking,
  type Tracked,
} from './tracking-runs';
import { trackSweep } from './tracking-sweep';

export { trackingTarget, type RoundTracking } from './tracking-runs';

/**
 * Experiment tracking in MLflow, logged from the durable records only: a campaign is a run, each round a nested run
 * (found again by tag, never made twice: tracking-runs.ts); a staged campaign's rounds nest under a run per stage, nested
 * under the campaign's, to which the campaign's summaries add the stage's verdict (gate, headline metric, checkpoints);
 * a sweep's arms nest under its round's run, to which they add its decisions (tracking-sweep.ts). A
 * round's per-step metrics are logged when a segment has flushed its step records, from those records, with the
 * records' own step numbers and timestamps. A cursor in the round's steps directory (`tracked.json`) says how far
 * the run holds them: an attempt that dies after logging but before moving the cursor logs the same (key, step,
 * timestamp, value) again, which MLflow stores once; one that dies before logging leaves the cursor behind, and the
 * next segment (or the round's report) logs the gap from the store.
 * Tracking never fails a round: an unreachable server is a warning, and the next segment catches up.
 */

/** A step record's metrics: the loss and learning rate, and its round kind's own (config/rules/round-kinds.ts). */
function stepMetrics(r: StepRecord & Record<string, unknown>, spec: RoundSpec, totalSteps: number, at: number): MlflowMetric[] {
  const out: MlflowMetric[] = [];
  const add = (key: string, value: unknown) => {
    if (typeof value === 'number' && Number.isFinite(value)) out.push({ key, value, timestamp: at, step: r.step });
  };
  add('train/loss_per_token', r.tokens > 0 ? lossPerTokenOf(r) : undefined);
  if (totalSteps > 0) add('train/learning_rate', learningRateOf(spec, r.step, totalSteps));
  for (const [key, field] of Object.entries(descriptorOf(spec).trackedSteps)) add(key, r[field]);
  // A custom round's loss function names its own metrics.
  const named = r.metrics;
  if (named && typeof named === 'object') for (const [name, value] of Object.entries(named)) add(`train/${name}`, value);
  return out;
}

/** The learning rate the step was taken with (the schedule is a pure function of the step). */
function learningRateOf(spec: RoundSpec, step: number, totalSteps: number): number {
  const t = spec.training;
  return learningRateAt(step - 1, totalSteps, t.learningRate, t.lrSchedule);
}

interface Cursor {
  /** The last step the run holds, under `lineage`. */
  step: number;
  lineage: number;
}

const cursorFile = (stepsDir: string) => stepsFolder.trackingCursor(stepsDir, joinLocation);

/**
 * Logs the round's step records the run does not hold yet (past the cursor), then moves the cursor. `fresh` are the
 * records this segment just flushed (no store read when they follow the cursor); otherwise the records are read.
 */
export async function trackSteps(
  r: RoundTracking & { stepsDir: string; totalSteps: number; rollbacks?: Rollback[] },
  fresh: StepRecord[] = [],
): Promise<void> {
  const target = trackingTarget(r.spec);
  if (!target) return;
  try {
    const { client, runId } = await roundRun(target, r);
    const cursor = (await readJson<Cursor>(cursorFile(r.stepsDir))) ?? { step: 0, lineage: 0 };
    const first = fresh.length ? Math.min(...fresh.map((x) => x.step)) : Infinity;
    const sameLineage = fresh.every((x) => (x.lineage ?? 0) === cursor.lineage);
    const records = first === cursor.step + 1 && sameLineage ? fresh : await readStepRecords(r.stepsDir, r.rollbacks);
    // A newer lineage (after a rollback) retrained steps the run already holds: they are logged again, retrained.
    const due = records.filter((x) => (x.lineage ?? 0) > cursor.lineage || x.step > cursor.step).sort((a, b) => a.step - b.step);
    if (due.length === 0) return;
    const metrics = due.flatMap((x) => stepMetrics(x as StepRecord & Record<string, unknown>, r.spec, r.totalSteps, x.at ?? Date.now()));
    await client.logBatch(runId, { metrics });
    const last = due[due.length - 1]!;
    await writeJsonAtomic(cursorFile(r.stepsDir), {
      step: last.step,
      lineage: Math.max(cursor.lineage, ...due.map((x) => x.lineage ?? 0)),
    });
  } catch (err) {
    warn(`MLflow: could not log steps of round ${r.round} of ${r.campaignId} (the next segment retries): ${(err as Error).message}`);
  }
}

/**
 * An evaluation during training, logged at its step with the workflow's timestamp: a retried attempt logs the same
 * (key, step, timestamp, value), which MLflow stores once.
 */
export async function trackEvaluation(
  r: RoundTracking,
  point: { step: number; loss: number; metric?: number; margin?: number; at: number },
): Promise<void> {
  const target = trackingTarget(r.spec);
  if (!target) return;
  try {
    const { client, runId } = await roundRun(target, r);
    const metrics: MlflowMetric[] = [];
    const add = (key: string, value: unknown) => {
      if (typeof value === 'number' && Number.isFinite(value)) metrics.push({ key, value, timestamp: point.at, step: point.step });
    };
    add('eval/loss', point.loss);
    add(descriptorOf(r.spec).trackedEvalMetric, point.metric);
    add('eval/dpo_margin', point.margin);
    await client.logBatch(runId, { metrics });
  } catch (err) {
    warn(`MLflow: could not log the evaluation at step ${point.step} of round ${r.round} of ${r.campaignId}: ${(err as Error).message}`);
  }
}

/** At the round's report: the steps not logged yet, the round's figures, its report as an artifact, its status. */
export async function trackRoundEnd(
  r: RoundTracking & { stepsDir?: string; totalSteps: number; rollbacks?: Rollback[] },
  report: RoundReportFields,
  reportBody: string,
  reportName: string,
): Promise<void> {
  const target = trackingTarget(r.spec);
  if (!target) return;
  if (r.stepsDir) await trackSteps({ ...r, stepsDir: r.stepsDir });
  try {
    const { client, runId } = await roundRun(target, r);
    const at = Date.now();
    const metrics: MlflowMetric[] = [];
    const add = (key: string, value: unknown, step: number) => {
      if (typeof value === 'number' && Number.isFinite(value)) metrics.push({ key, value, timestamp: at, step });
    };
    const applied = report.steps_applied;
    // A round stopped early finishes from its best evaluated weights: its final figures are that step's.
    const measured = report.early_stop?.best_step ?? applied;
    add('eval/loss', report.baseline_loss, 0);
    add('eval/loss', report.trained_loss, measured);
    add('eval/preference_accuracy', report.baseline_preference_accuracy, 0);
    add('eval/dpo_margin', report.baseline_margin, 0);
    add('eval/dpo_margin', report.trained_margin, measured);
    add('eval/metric', report.accuracy, measured);
    for (const [name, value] of Object.entries(report.loss_metrics?.baseline ?? {})) add(`eval/${name}`, value, 0);
    for (const [name, value] of Object.entries(report.loss_metrics?.trained ?? {})) add(`eval/${name}`, value, measured);
    const passAtK = report.pass_at_k;
    if (passAtK) add(`eval/pass_at_${passAtK.k}`, passAtK.value, measured);
    add('eval/pool_metric', report.pool_accuracy, measured);
    // The held-out test set's own key: never confused with eval's in a chart or a comparison.
    add('test/metric', report.test?.accuracy, measured);
    add('round/gpu_minutes', report.gpu_minutes, applied);
    add('round/cost_usd', report.estimated_cost_usd, applied);
    add('round/steps_applied', report.steps_applied, applied);
    await client.logBatch(runId, { metrics, tags: { 'roundhouse.status': report.status } });
    await client.uploadArtifact(runId, reportName, reportBody, 'application/json');
    const status = report.status === 'completed' ? 'FINISHED' : report.status === 'failed' ? 'FAILED' : 'KILLED';
    await client.setStatus(runId, status, at);
  } catch (err) {
    warn(`MLflow: could not log the end of round ${r.round} of ${r.campaignId}: ${(err as Error).message}`);
  }
}

/** A round as the campaign's summary shows it (RoundSummary). */
type SummaryRound = GatedRound & {
  round: number;
  status?: string;
  stage?: number;
  gpuMinutes?: number;
  costUsd?: number;
  test?: { accuracy: number };
  sweep?: SweepRecord;
};

/**
 * At each campaign summary: per-round figures on the campaign run, its reports as artifacts, its stages' and its sweep's
 * runs (tracking-sweep.ts), and its status at the end.
 */
export async function trackCampaign(
  track: Tracked,
  campaignId: string,
  summary: {
    status?: string;
    rounds?: SummaryRound[];
    stages?: ShownStage[];
    limits?: { maxUsd?: number };
  },
  artifacts: { name: string; body: Buffer | string; contentType: string }[],
): Promise<void> {
  const target = trackingTarget(track);
  if (!target) return;
  try {
    const client = clientFor(target.uri);
    const experimentId = await experimentOf(client, target.experiment);
    const runId = await campaignRun(client, experimentId, campaignId, specParams({ name: track.name }));
    // Stable timestamps (one per round, from the round number) so that a summary written again logs nothing new.
    const metrics: MlflowMetric[] = [];
    let spent = 0;
    for (const round of summary.rounds ?? []) {
      const add = (key: string, value: unknown) => {
        if (typeof value === 'number' && Number.isFinite(value)) metrics.push({ key, value, timestamp: round.round, step: round.round });
      };
      add('round/metric', round.accuracy);
      add('round/test_metric', round.test?.accuracy);
      add('round/eval_loss', round.trainedLoss);
      add('round/gpu_minutes', round.gpuMinutes);
      add('round/cost_usd', round.costUsd);
      // `budget.maxUsd`: the campaign's spend after each round, against its budget.
      if (summary.limits?.maxUsd !== undefined) {
        spent += round.costUsd ?? 0;
        add('campaign/spent_usd', spent);
        add('campaign/budget_usd', summary.limits.maxUsd);
      }
    }
    await client.logBatch(runId, { metrics, tags: { 'roundhouse.status': String(summary.status) } });
    for (const a of artifacts) await client.uploadArtifact(runId, a.name, a.body, a.contentType);
    const final = summary.status ? FINAL_STATUS[summary.status] : undefined;
    for (const stage of summary.stages ?? []) await trackStage(client, experimentId, campaignId, stage, summary.rounds ?? [], final);
    for (const round of summary.rounds ?? []) {
      if (!round.sweep) continue;
      const stage = summary.stages?.find((s) => s.stage === round.stage);
      const parent = stage ? await stageRun(client, experimentId, campaignId, stage, {}) : runId;
      // Its status once, in the summary written after it (and again at the campaign's end).
      const ended = round.status ? FINAL_STATUS[round.status] : undefined;
      const endsHere = summary.rounds!.at(-1)?.round === round.round;
      const sweep = { campaignId, round: round.round, kind: round.kind, stage: round.stage, parent, sweep: round.sweep };
      await trackSweep(client, experimentId, sweep, endsHere || final ? ended : undefined);
    }
    if (final) await client.setStatus(runId, final, Date.now());
  } catch (err) {
    warn(`MLflow: could not log campaign ${campaignId}: ${(err as Error).message}`);
  }
}

/**
 * A stage's run, from the campaign's summary: its verdict and checkpoints as tags, the metric that matters for its kind
 * per round (`stage/accuracy`, `stage/mean_reward`, `stage/preference_accuracy`; stable timestamps, so a summary
 * written again logs nothing new), and its status once it ends (the gate missed: FAILED) or the campaign does.
 */
async function trackStage(
  client: MlflowClient,
  experimentId: string,
  campaignId: string,
  stage: ShownStage,
  rounds: (GatedRound & { round: number; stage?: number })[],
  campaignFinal: 'FINISHED' | 'FAILED' | 'KILLED' | undefined,
): Promise<void> {
  const runId = await stageRun(client, experimentId, campaignId, stage, {});
  const facts = stageFacts(stage);
  const { metric } = stage.headline;
  const key = `stage/${metric.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`;
  const metrics: MlflowMetric[] = [];
  for (const round of rounds.filter((r) => r.stage === stage.stage)) {
    const value = metricOf(metric, round);
    if (value !== undefined && Number.isFinite(value)) metrics.push({ key, value, timestamp: round.round, step: round.round });
  }
  const tags: Record<string, string> = {
    'roundhouse.first_round': String(stage.firstRound),
    'roundhouse.rounds': String(stage.rounds),
    'roundhouse.headline': facts.headline,
    'roundhouse.started_from': facts.startedFrom ?? 'base model',
    ...(facts.carried ? { 'roundhouse.loaded': facts.carried } : {}),
    ...(facts.gate ? { 'roundhouse.gate': facts.gate, 'roundhouse.gate_passed': String(stage.gate!.passed) } : {}),
    ...(stage.endedBy ? { 'roundhouse.ended_by': stage.endedBy } : {}),
    ...(facts.passedOn ? { 'roundhouse.passed_on': facts.passedOn } : {}),
  };
  await client.logBatch(runId, { metrics, tags });
  // Its status once, in the summary written after its last round (and again at the campaign's end).
  const endsHere = stage.endedBy !== undefined && stage.firstRound + stage.rounds - 1 === rounds.at(-1)?.round;
  const status = stage.gate?.passed === false ? 'FAILED' : stage.endedBy ? 'FINISHED' : campaignFinal;
  if (status && (endsHere || campaignFinal)) await client.setStatus(runId, status, Date.now());
}

function warn(message: string): void {
  try {
    Context.current().log.warn(message);
  } catch {
    process.stderr.write(`${maskSecrets(message)}\n`);
  }
}

/** The alias the Model Registry gives a line's champion. */
export const CHAMPION_ALIAS = 'champion';
const DECISION_TAG = 'roundhouse.decision';

/**
 * A line's champion in MLflow's Model Registry: the registered model `<line>`, one version per promotion (tagged with
 * its decision, so a retried or re-run registration finds its version instead of making a second) whose source is the
 * campaign's run, and the `champion` alias moved to it. Undefined when the campaign is not tracked.
 */
export async function registerChampion(
  track: Tracked,
  record: {
    line: string;
    decisionId: string;
    checkpointId: string;
    campaignId: string;
    round: number;
    figures: { on: string; accuracy: number; sha256: string };
  },
): Promise<{ name: string; version: string } | undefined> {
  const target = trackingTarget(track);
  if (!target) return undefined;
  const client = clientFor(target.uri);
  const experimentId = await experimentOf(client, target.experiment);
  const runId = await campaignRun(client, experimentId, record.campaignId, specParams(track));
  await client.ensureRegisteredModel(record.line, `Roundhouse model line ${record.line}: its champion is the alias @${CHAMPION_ALIAS}`);
  let version = (await client.modelVersions(record.line)).find((v) => v.tags[DECISION_TAG] === record.decisionId)?.version;
  version ??= await client.createModelVersion(record.line, {
    source: `runs:/${runId}/champion`,
    runId,
    tags: {
      [DECISION_TAG]: record.decisionId,
      'roundhouse.checkpoint_id': record.checkpointId,
      'roundhouse.campaign_id': record.campaignId,
      'roundhouse.round': String(record.round),
      [`roundhouse.${record.figures.on}_accuracy`]: String(record.figures.accuracy),
      [`roundhouse.${record.figures.on}_sha256`]: record.figures.sha256,
    },
    description: `round ${record.round} of ${record.campaignId}, checkpoint ${record.checkpointId}`,
  });
  if ((await client.aliasVersion(record.line, CHAMPION_ALIAS)) !== version) await client.setAlias(record.line, CHAMPION_ALIAS, version);
  return { name: record.line, version };
}

/**
 * Moves the `champion` alias to the version registered for `decisionId`, when there is one: the alias follows the
 * champion recorded last, never the last registration to finish. No version yet: its own registration moves it.
 */
export async function pointChampionAlias(track: Tracked, line: string, decisionId: string): Promise<void> {
  const target = trackingTarget(track);
  if (!target) return;
  const client = clientFor(target.uri);
  const version = (await client.modelVersions(line)).find((v) => v.tags[DECISION_TAG] === decisionId)?.version;
  if (version && (await client.aliasVersion(line, CHAMPION_ALIAS)) !== version) await client.setAlias(line, CHAMPION_ALIAS, version);
}

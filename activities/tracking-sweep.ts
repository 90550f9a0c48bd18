import { describeAssignment } from '../config/rules/sweep';
import type { MlflowClient, MlflowMetric } from '../providers/mlflow/client';
import type { SweepArmRecord, SweepRecord } from '../workflows/sweep/record';
import { armRunKey, keyedRun, sweepRun, type RunStatus, type SweepRunOf } from './tracking-runs';

/**
 * A sweep's run (the campaign's round with `sweep`, its arms' runs nested under it), from the campaign's summary once
 * the sweep has ended: the swept fields as params, each the list of values its arms took, beside how it selected
 * (metric, η, rung steps); each arm's eval figure at each rung and its final one (`sweep/arm_<k>/<metric>`), the arms
 * measured and kept at each rung (`sweep/arms_measured`, `sweep/arms_kept`) and the winner's figure, at their optimizer
 * steps with the step as timestamp (a summary written again logs nothing new); the winner as tags; and on each arm's
 * run, how it ended in the sweep (`roundhouse.sweep_outcome`).
 */
export async function trackSweep(
  client: MlflowClient,
  experimentId: string,
  s: Omit<SweepRunOf, 'fields'> & { sweep: SweepRecord },
  status: RunStatus | undefined,
): Promise<void> {
  const { sweep, ...run } = s;
  const fields = Object.keys(sweep.arms[0]?.assign ?? {});
  const runId = await sweepRun(client, experimentId, { ...run, fields });
  const metrics: MlflowMetric[] = [];
  const add = (key: string, value: number | undefined, step: number) => {
    if (value !== undefined && Number.isFinite(value)) metrics.push({ key, value, timestamp: step, step });
  };
  for (const arm of sweep.arms) {
    const key = `sweep/arm_${arm.arm}/${sweep.metric}`;
    for (const rung of arm.rungs) add(key, rung.value, rung.step);
    add(key, arm.final, arm.step);
  }
  for (const d of sweep.decisions) {
    add('sweep/arms_measured', d.figures.length, d.step);
    add('sweep/arms_kept', d.kept.length, d.step);
  }
  const winner = sweep.winner;
  const winnerArm = winner && sweep.arms.find((a) => a.arm === winner.arm);
  if (winnerArm) add(`sweep/winner_${sweep.metric}`, winner.value, winnerArm.step);
  const params: Record<string, string> = {
    'sweep.fields': fields.join(', '),
    ...Object.fromEntries(fields.map((f) => [f, JSON.stringify([...new Set(sweep.arms.map((a) => a.assign[f]))])])),
    'sweep.arms': String(sweep.arms.length),
    'sweep.metric': sweep.metric,
    'sweep.eta': String(sweep.eta),
    'sweep.rung_steps': String(sweep.rungSteps),
  };
  const tags: Record<string, string> = winner
    ? { 'roundhouse.winner_arm': String(winner.arm), 'roundhouse.winner': describeAssignment(winner.assign) }
    : {};
  await client.logBatch(runId, { metrics, params, tags });
  for (const arm of sweep.arms) {
    // An arm that never reached the tracker (it failed before its first step) has no run: none is made here.
    const armRun = await keyedRun(client, experimentId, armRunKey(run.campaignId, run.round, arm.arm));
    if (armRun) await client.logBatch(armRun, { tags: { 'roundhouse.sweep_outcome': outcomeOf(arm, sweep) } });
  }
  if (status) await client.setStatus(runId, status, Date.now());
}

function outcomeOf(arm: SweepArmRecord, sweep: SweepRecord): string {
  if (sweep.winner?.arm === arm.arm) return 'winner';
  return arm.stoppedAtRung !== undefined ? `stopped at rung ${arm.stoppedAtRung}` : arm.status;
}

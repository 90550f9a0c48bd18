import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { trackCampaign, trackEvaluation, trackRoundEnd, trackSteps } from '../../activities/tracking';
import type { RoundTracking } from '../../activities/tracking-runs';
import { StepRecords, type StepRecord } from '../../activities/step-records';
import type { RoundReportFields } from '../../config/io/round-report';
import { rungDecision, withAssignment } from '../../config/rules/sweep';
import { MlflowClient } from '../../providers/mlflow/client';
import { roundSpecOf } from '../../workflows/round/contract';
import type { SweepArmRecord, SweepRecord } from '../../workflows/sweep/record';
import { ticketCampaignSpec } from '../helpers/campaign';
import { roundReportOf } from '../helpers/round-report';
import {
  paramOf as param,
  runsOf as mlflowRuns,
  startMlflowServer,
  tagOf as tag,
  type RunningMlflow,
  type SearchedRun,
} from '../helpers/mlflow-server';

// A sweep in MLflow, as MLflow's convention for sweeps has it, against a real `mlflow server`: the campaign's run → the
// sweep's run (its round 1) → one run per arm. The arms' tracking calls (their segments' steps, their evaluations at
// the rung, their reports) run as the arms' activities do, side by side; then the campaign's summary with the sweep.

let mlflow: RunningMlflow;

beforeAll(async () => {
  mlflow = await startMlflowServer();
}, 600_000);

afterAll(async () => {
  await mlflow?.close();
});

const runsOf = (experimentName: string) => mlflowRuns(mlflow.uri, experimentName);

/** A round report's fields as the round workflow hands them to the report activity. */
function reportOf(campaignId: string, status: string, steps: number, trainedLoss: number | null): RoundReportFields {
  return roundReportOf({ campaign_id: campaignId, round: 1, status, steps_applied: steps, trained_loss: trainedLoss });
}

test("a sweep's arms: one run per arm under the sweep's round run, under the campaign's; each arm's fields its params; the rung decisions and the winner on the sweep's run", async () => {
  const experiment = `roundhouse-sweep-${process.pid}-${Date.now()}`;
  const tracking = { mlflow: { uri: mlflow.uri, experiment } };
  const { spec } = ticketCampaignSpec({
    baseUrl: 'http://127.0.0.1:9',
    yaml: `rounds: { max: 2, nextData: { policy: static } }
tracking: { mlflow: { uri: "${mlflow.uri}", experiment: "${experiment}" } }
sweep:
  over: { training.learningRate: [0.001, 0.004, 0.016] }
  select: { metric: eval_loss, rungs: 2, eta: 2 }`,
  });
  const campaignId = `sweep-mlflow-${process.pid}`;
  const arms = spec.sweep!.arms;
  // The eval loss of each arm at its rung (step 2) and at its end (step 4): arm 3's learning rate is too high.
  const rungLoss = [1.5, 1.2, 1.9];
  const finalLoss = [1.1, 0.9, undefined];
  const decision = rungDecision(
    arms.map((a, i) => ({ arm: a.arm, value: rungLoss[i]! })),
    'eval_loss',
    2,
  );
  expect(decision).toEqual({ kept: [1, 2], stopped: [3] });

  // Each arm as its round's activities track it, the arms side by side.
  const env = new MockActivityEnvironment();
  await Promise.all(
    arms.map((a, i) =>
      env.run(async () => {
        const armCampaignId = `${campaignId}-arm${a.arm}`;
        const r: RoundTracking = {
          campaignId: armCampaignId,
          round: 1,
          spec: { ...withAssignment(roundSpecOf(spec), a.assign), sweepArm: { campaignId, ...a } },
        };
        const stepsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-sweep-steps-'));
        const stopped = decision.stopped.includes(a.arm);
        const steps = stopped ? 2 : 4;
        const records = await StepRecords.load<StepRecord>(stepsDir, 0);
        for (let step = 1; step <= steps; step++) records.add({ step, loss: 20 - step - i, tokens: 10, at: 1_000 + step });
        const track = { ...r, stepsDir, totalSteps: 4 };
        await trackSteps(track, await records.flush());
        await trackEvaluation(r, { step: 2, loss: rungLoss[i]!, at: 1_002 });
        const report = reportOf(armCampaignId, stopped ? 'stopped' : 'completed', steps, finalLoss[i] ?? null);
        await trackRoundEnd(track, report, JSON.stringify(report), 'round-1.json');
      }),
    ),
  );

  // The campaign's summary once the sweep ended: its record, as the sweep made it.
  const armRecord = (i: number): SweepArmRecord => {
    const a = arms[i]!;
    const stopped = decision.stopped.includes(a.arm);
    return {
      arm: a.arm,
      assign: a.assign,
      workflowId: `${campaignId}-round-1-arm-${a.arm}`,
      status: stopped ? 'stopped' : 'completed',
      rungs: [{ rung: 1, step: 2, value: rungLoss[i]! }],
      ...(stopped ? { stoppedAtRung: 1 } : { final: finalLoss[i]! }),
      step: stopped ? 2 : 4,
    };
  };
  const sweep: SweepRecord = {
    metric: 'eval_loss',
    eta: 2,
    rungSteps: 2,
    arms: arms.map((_, i) => armRecord(i)),
    decisions: [{ rung: 1, step: 2, figures: arms.map((a, i) => ({ arm: a.arm, value: rungLoss[i]! })), ...decision }],
    winner: { arm: 2, assign: arms[1]!.assign, value: 0.9 },
  };
  const summary = {
    status: 'running',
    rounds: [{ round: 1, status: 'completed', kind: 'sft' as const, trainedLoss: 0.9, gpuMinutes: 0.3, sweep }],
  };
  await env.run(() => trackCampaign({ name: spec.name, tracking }, campaignId, summary, []));

  const runs = await runsOf(experiment);
  // The campaign, the sweep, three arms: none made twice by the arms racing to make the runs they share.
  expect(runs).toHaveLength(5);
  const byName = (name: string) => runs.find((r) => r.info.run_name === name)!;
  const campaign = byName(campaignId);
  const sweepRun = byName('round-1');
  expect(tag(campaign, 'mlflow.parentRunId')).toBeUndefined();
  expect(tag(sweepRun, 'mlflow.parentRunId')).toBe(campaign.info.run_id);
  expect(tag(sweepRun, 'roundhouse.sweep')).toBe('true');
  // The campaign's params are its spec's but for the swept field, which is each arm's own.
  expect(param(campaign, 'provider.model')).toBe('roundhouse/tiny-chat');
  expect(param(campaign, 'training.learningRate')).toBeUndefined();
  expect(param(campaign, 'sweepArm.arm')).toBeUndefined();

  const armRuns = arms.map((a) => byName(`arm-${a.arm}`));
  expect(armRuns.map((r) => tag(r, 'mlflow.parentRunId'))).toEqual(arms.map(() => sweepRun.info.run_id));
  expect(armRuns.map((r) => [tag(r, 'roundhouse.arm'), param(r, 'arm'), param(r, 'training.learningRate')])).toEqual([
    ['1', '1', '0.001'],
    ['2', '2', '0.004'],
    ['3', '3', '0.016'],
  ]);
  expect(armRuns.map((r) => [tag(r, 'roundhouse.campaign_id'), tag(r, 'roundhouse.workflow_id'), tag(r, 'roundhouse.assign')])).toEqual(
    arms.map((a) => [campaignId, `${campaignId}-round-1-arm-${a.arm}`, `training.learningRate=${a.assign['training.learningRate']}`]),
  );
  // Each arm's own figures, as a round's: its steps, its eval loss at the rung and at its end, its status.
  const client = new MlflowClient(mlflow.uri);
  const history = async (run: SearchedRun, key: string) =>
    (await client.metricHistory(run.info.run_id, key)).sort((a, b) => a.step - b.step).map((m) => [m.step, m.value]);
  expect((await history(armRuns[2]!, 'train/loss_per_token')).map(([step]) => step)).toEqual([1, 2]);
  expect((await history(armRuns[1]!, 'train/loss_per_token')).map(([step]) => step)).toEqual([1, 2, 3, 4]);
  expect(await history(armRuns[1]!, 'eval/loss')).toEqual([
    [0, 2],
    [2, 1.2],
    [4, 0.9],
  ]);
  expect(armRuns.map((r) => [r.info.status, tag(r, 'roundhouse.sweep_outcome')])).toEqual([
    ['FINISHED', 'completed'],
    ['FINISHED', 'winner'],
    ['KILLED', 'stopped at rung 1'],
  ]);

  // The sweep's run: the swept field's values, how it selected, each arm's figures, the decision and the winner.
  expect(
    ['training.learningRate', 'sweep.fields', 'sweep.arms', 'sweep.metric', 'sweep.eta', 'sweep.rung_steps'].map((k) => param(sweepRun, k)),
  ).toEqual(['[0.001,0.004,0.016]', 'training.learningRate', '3', 'eval_loss', '2', '2']);
  expect(await history(sweepRun, 'sweep/arms_kept')).toEqual([[2, 2]]);
  expect(await history(sweepRun, 'sweep/arms_measured')).toEqual([[2, 3]]);
  expect(await history(sweepRun, 'sweep/arm_3/eval_loss')).toEqual([[2, 1.9]]);
  expect(await history(sweepRun, 'sweep/arm_2/eval_loss')).toEqual([
    [2, 1.2],
    [4, 0.9],
  ]);
  expect(await history(sweepRun, 'sweep/winner_eval_loss')).toEqual([[4, 0.9]]);
  expect([tag(sweepRun, 'roundhouse.winner_arm'), tag(sweepRun, 'roundhouse.winner')]).toEqual(['2', 'training.learningRate=0.004']);
  expect(sweepRun.info.status).toBe('FINISHED');

  // The summary logged again (the campaign's next summary, or a retried activity): the same runs, the same points.
  await env.run(() => trackCampaign({ name: spec.name, tracking }, campaignId, summary, []));
  expect(await runsOf(experiment)).toHaveLength(5);
  expect(await history(sweepRun, 'sweep/arm_2/eval_loss')).toHaveLength(2);
}, 300_000);

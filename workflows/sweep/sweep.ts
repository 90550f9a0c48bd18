import {
  ApplicationFailure,
  ParentClosePolicy,
  condition,
  getExternalWorkflowHandle,
  setHandler,
  startChild,
  workflowInfo,
} from '@temporalio/workflow';
import type { ChildWorkflowHandle } from '@temporalio/workflow';
import { describeAssignment, lowerIsBetter, rungDecision, withAssignment, type SweepArm } from '../../config/rules/sweep';
import { childRoundResultOf, failureReasonOf, failureTypeOf, isCancellation } from '../failures';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  roundProgressQuery,
  roundProgressSignal,
  setRoundBudgetSignal,
  type RoundBudget,
  type RoundInput,
  type RoundProgress,
  type RoundResult,
} from '../round/contract';
import { roundWorkflow } from '../round/round';
import { SweepTrainers } from './trainers';
import { roundActivities } from '../round/activities';
import { armDecisionSignal, armRungSignal, type SweepArmRecord, type SweepInput, type SweepRecord, type SweepResult } from './contract';

/**
 * A sweep: the campaign's round as arms, each a round of its own (its lineage, keys, records and checkpoints, so every
 * exactly-once guarantee holds per arm), trained side by side. At each rung every arm still running reports its eval
 * figure and waits; the sweep keeps the best ⌈n / η⌉ (successive halving) and stops the rest, which checkpoint and
 * release their trainers at once. The decision is made once, in this workflow's history. The best arm that completed
 * is the winner: its result is the round's, and the campaign continues from it.
 */
export async function sweepWorkflow(input: SweepInput): Promise<SweepResult> {
  const { round, select } = input;
  const record: SweepRecord = { metric: select.metric, eta: select.eta, rungSteps: select.rungs, arms: [], decisions: [] };
  const progress = new Map<number, RoundProgress>();
  const reported = new Map<string, { step: number; value: number }>(); // `${arm}/${rung}`
  const children = new Map<number, ChildWorkflowHandle<typeof roundWorkflow>>();
  /** Each arm's round result, once it ended with one. */
  const results = new Map<number, RoundResult>();
  let paused = false;
  const trainers = new SweepTrainers(round.spec);
  // Its messages, before the first await: the arms' rung figures and progress; pause, resume and the budget, from the
  // campaign (passed on to every running arm); the progress query (the arms side by side).
  setHandler(armRungSignal, ({ arm, rung, step, value }) => void reported.set(`${arm}/${rung}`, { step, value }));
  setHandler(roundProgressSignal, (p) => {
    const arm = armOfCampaignId(p.campaignId);
    if (arm !== undefined) progress.set(arm, p);
    void tellCampaign();
  });
  setHandler(roundProgressQuery, () => snapshot());
  setHandler(pauseRoundSignal, () => {
    paused = true;
    forward((c) => c.signal(pauseRoundSignal));
  });
  setHandler(resumeRoundSignal, () => {
    paused = false;
    forward((c) => c.signal(resumeRoundSignal));
  });
  setHandler(setRoundBudgetSignal, (budget) => forward((c) => c.signal(setRoundBudgetSignal, armBudget(budget, input.arms.length))));

  const armCampaignId = (arm: number) => `${round.campaignId}-arm${arm}`;
  function armOfCampaignId(id: string): number | undefined {
    const m = /-arm(\d+)$/.exec(id);
    return m && id === armCampaignId(Number(m[1])) ? Number(m[1]) : undefined;
  }
  const live = (a: SweepArmRecord) => a.status === 'running';
  function forward(send: (c: ChildWorkflowHandle<typeof roundWorkflow>) => Promise<void>): void {
    for (const a of record.arms) if (live(a)) void send(children.get(a.arm)!).catch(() => undefined);
  }
  function snapshot(): RoundProgress {
    const arms = [...progress.values()];
    const sum = (f: (p: RoundProgress) => number | undefined) => arms.reduce((s, p) => s + (f(p) ?? 0), 0);
    const running = arms.filter((p) => record.arms.find((a) => a.arm === armOfCampaignId(p.campaignId))?.status === 'running');
    return {
      campaignId: round.campaignId,
      round: round.round,
      phase: running[0]?.phase ?? 'training',
      step: Math.max(0, ...arms.map((p) => p.step)),
      totalSteps: Math.max(0, ...arms.map((p) => p.totalSteps)),
      gpuMinutes: sum((p) => p.gpuMinutes) + trainers.gpuMinutes(),
      costUsd:
        arms.some((p) => p.costUsd !== undefined) || trainers.costUsd() !== undefined
          ? sum((p) => p.costUsd) + (trainers.costUsd() ?? 0)
          : undefined,
      ...(paused ? { paused } : {}),
      sweep: { ...record, arms: record.arms.map((a) => ({ ...a, step: progress.get(a.arm)?.step ?? a.step })) },
    };
  }
  async function tellCampaign(): Promise<void> {
    const parent = workflowInfo().parent;
    if (parent)
      await getExternalWorkflowHandle(parent.workflowId, parent.runId)
        .signal(roundProgressSignal, snapshot())
        .catch(() => undefined);
  }

  try {
    return await runArms();
  } catch (err) {
    // A check or a provisioning that failed fails the sweep under its own type (InvalidInput, CapacityUnavailable…).
    if (isCancellation(err) || err instanceof ApplicationFailure) throw err;
    throw ApplicationFailure.create({ type: failureTypeOf(err), message: failureReasonOf(err), nonRetryable: true, cause: err as Error });
  } finally {
    await trainers.releaseAll();
  }

  async function runArms(): Promise<SweepResult> {
    // The round's data, model and budget checked once before any trainer is provisioned (each arm checks again).
    await roundActivities(round.spec.advanced.heartbeatTimeoutSeconds).checks.prepareRound({
      spec: round.spec,
      data: round.data,
      ...(round.budget?.maxUsd !== undefined ? { budget: round.budget } : {}),
    });
    // Where the dialect says how many sessions a trainer takes, the arms go side by side on shared trainers.
    const packed = await trainers.provision(input.arms.map((a) => a.arm));
    // Every arm starts at once: each is a round of its own, under its own business identity and report folder.
    const running = input.arms.map(async (arm): Promise<void> => {
      const armInput = armRoundInput(
        round,
        arm,
        select,
        armCampaignId(arm.arm),
        input.arms.length,
        packed ? trainers.of(arm.arm) : undefined,
      );
      const workflowId = `${workflowInfo().workflowId}-arm-${arm.arm}`;
      const entry: SweepArmRecord = { arm: arm.arm, assign: arm.assign, workflowId, status: 'running', rungs: [], step: 0 };
      record.arms.push(entry);
      let result: RoundResult | undefined;
      try {
        const child = await startChild(roundWorkflow, {
          workflowId,
          args: [armInput],
          parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        });
        children.set(arm.arm, child);
        if (paused) await child.signal(pauseRoundSignal);
        result = await child.result();
      } catch (err) {
        if (isCancellation(err)) throw err;
        result = childRoundResultOf<RoundResult>(err);
        if (!result) entry.status = 'failed';
      }
      if (result) settle(entry, result, select.metric);
      void tellCampaign();
    });
    record.arms.sort((a, b) => a.arm - b.arm);
    const ended = Promise.all(running);
    let allEnded = false;
    void ended.then(() => void (allEnded = true)).catch(() => void (allEnded = true));
    if (packed) {
      // A shared trainer goes once its last arm has ended (or every arm on it is paused); the budget is the trainers'.
      const done = (arm: number) => {
        const a = record.arms.find((x) => x.arm === arm);
        return !a || a.status !== 'running' || (paused && progress.get(arm)?.phase === 'paused');
      };
      void trainers.releaseWhenDone(done).catch(() => undefined);
      void trainers
        .watchBudget(
          round.budget,
          (reason) => forward((c) => c.signal(setRoundBudgetSignal, { exhausted: reason })),
          () => allEnded,
        )
        .catch(() => undefined);
    }

    // Rung by rung: when every running arm has reported the rung (or ended), decide once and tell each.
    for (let rung = 1; !allEnded; rung++) {
      const waiting = () => record.arms.filter((a) => live(a) && !reported.has(`${a.arm}/${rung}`));
      await condition(() => allEnded || waiting().length === 0);
      const reporters = record.arms.filter((a) => live(a) && reported.has(`${a.arm}/${rung}`));
      if (!reporters.length) {
        if (allEnded) break;
        continue;
      }
      const figures = reporters.map((a) => ({ arm: a.arm, value: reported.get(`${a.arm}/${rung}`)!.value }));
      const decision = rungDecision(figures, select.metric, select.eta);
      const step = reported.get(`${reporters[0]!.arm}/${rung}`)!.step;
      record.decisions.push({ rung, step, figures, ...decision });
      for (const a of reporters) {
        a.rungs.push({ rung, step, value: reported.get(`${a.arm}/${rung}`)!.value });
        const keep = decision.kept.includes(a.arm);
        if (!keep) a.stoppedAtRung = rung;
        await children.get(a.arm)!.signal(armDecisionSignal, { rung, keep });
      }
      void tellCampaign();
    }
    await ended;

    const completed = record.arms.filter((a) => a.status === 'completed' && a.final !== undefined);
    const sign = lowerIsBetter(select.metric) ? 1 : -1;
    // The best arm that completed; none (a budget stopped the survivors), the best survivor by its latest rung: its
    // round is `stopped`, and so is the campaign.
    const latest = (a: SweepArmRecord) => a.rungs[a.rungs.length - 1]?.value ?? Number.NaN;
    const survivors = record.arms.filter((a) => a.status === 'stopped' && a.stoppedAtRung === undefined && Number.isFinite(latest(a)));
    const best =
      completed.sort((a, b) => sign * (a.final! - b.final!) || a.arm - b.arm)[0] ??
      survivors.sort((a, b) => sign * (latest(a) - latest(b)) || a.arm - b.arm)[0];
    const total = (f: (a: SweepArmRecord) => number | undefined) => record.arms.reduce((s, a) => s + (f(a) ?? 0), 0);
    await trainers.releaseAll();
    if (!best)
      throw ApplicationFailure.create({
        type: 'SweepFailed',
        message: `no arm of the sweep completed or kept weights: ${record.arms.map((a) => `arm ${a.arm} (${describeAssignment(a.assign)}) ${a.status}`).join('; ')}`,
        nonRetryable: true,
      });
    record.winner = { arm: best.arm, assign: best.assign, value: best.final ?? latest(best) };
    const winner = results.get(best.arm)!;
    return {
      ...winner,
      // The round's cost is the sweep's: every arm's, and its shared trainers' (billed per trainer, not per session).
      gpuMinutes: total((a) => a.gpuMinutes) + trainers.gpuMinutes(),
      ...(record.arms.some((a) => a.costUsd !== undefined) || trainers.costUsd() !== undefined
        ? { costUsd: total((a) => a.costUsd) + (trainers.costUsd() ?? 0) }
        : {}),
      sweep: { ...record, ...(packed ? { trainers: trainers.held.map((t) => ({ resourceId: t.resourceId, arms: t.arms })) } : {}) },
    };
  }

  function settle(entry: SweepArmRecord, result: RoundResult, metric: SweepInput['select']['metric']): void {
    entry.status = result.status;
    entry.step = result.stepsApplied;
    entry.reportPath = result.reportPath;
    entry.costUsd = result.costUsd;
    entry.gpuMinutes = result.gpuMinutes;
    const final = metric === 'eval_loss' ? result.trainedLoss : result.accuracy;
    if (result.status === 'completed' && final !== undefined) entry.final = final;
    results.set(entry.arm, result);
  }
}

/**
 * An arm's round: the campaign's round with the arm's fields set, evaluated at every rung (sampled too when the metric
 * is accuracy), under its own campaign id (its keys and records) and report folder, with its share of the budget.
 */
export function armRoundInput(
  round: RoundInput,
  arm: SweepArm,
  select: SweepInput['select'],
  campaignId: string,
  arms: number,
  sharedTrainer: string | undefined,
): RoundInput {
  const spec = withAssignment(round.spec, arm.assign);
  spec.sweepArm = { campaignId: round.campaignId, arm: arm.arm, assign: arm.assign };
  spec.evaluation = { ...spec.evaluation, every: select.rungs, ...(select.metric === 'accuracy' ? { sampleEvery: 1 } : {}) };
  // On a shared trainer the sweep watches the spend (the trainers bill, not the sessions): the arm keeps the deadline.
  const deadline = round.budget?.deadlineMs !== undefined ? { deadlineMs: round.budget.deadlineMs } : {};
  const budget = round.budget && (sharedTrainer ? deadline : armBudget(round.budget, arms));
  return {
    ...round,
    campaignId,
    spec,
    reportDir: `${round.reportDir}/sweep-r${round.round}/arm-${arm.arm}`,
    ...(budget ? { budget } : {}),
    arm: { arm: arm.arm, rungSteps: select.rungs, metric: select.metric },
    ...(sharedTrainer ? { sharedTrainer: { resourceId: sharedTrainer } } : {}),
  };
}

/** An arm's share of what the round may spend: an equal part of the GPU-minutes and dollars (the deadline is the same). */
function armBudget(budget: RoundBudget, arms: number): RoundBudget {
  return {
    ...budget,
    ...(budget.maxGpuMinutes !== undefined ? { maxGpuMinutes: budget.maxGpuMinutes / arms } : {}),
    ...(budget.maxUsd !== undefined ? { maxUsd: budget.maxUsd / arms } : {}),
  };
}

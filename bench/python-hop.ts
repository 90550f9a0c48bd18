import fs from 'node:fs';
import path from 'node:path';
import type { temporal } from '@temporalio/proto';
import type { RoundResult } from '../workflows/round/contract';
import { arithmeticRoundInput } from '../test/helpers/round';
import { readArtifact } from '../test/helpers/artifacts';
import { startPythonWorker, type PythonWorker } from '../test/helpers/python-worker';
import { note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';
import { roundWorkflow } from '../workflows';

type History = temporal.api.history.v1.IHistory;
type Reward = 'builtin' | 'python';

const TARGET = 1.05;
/** The Python worker's reward: the built-in `numeric` reward in Python, so both variants score alike. */
const NUMERIC_REWARD = path.join(__dirname, 'python', 'numeric_reward.py');

const EVENT = { workflowStarted: 1, workflowCompleted: 2, activityScheduled: 10, activityStarted: 11, activityCompleted: 12 } as const;

interface Run {
  reward: Reward;
  steps: number;
  trainingMs: number;
  roundEvents: number;
  trainingEvents: number;
  meanRewards: number[];
  calls: History[];
}

/**
 * What a Python reward adds to a GRPO step: the same round (arithmetic sums, seed, steps, groups, batch) scored by
 * the built-in `numeric` reward and by the same reward on a Python worker (`bench/python/numeric_reward.py`), back
 * to back in one process against one emulator whose operations take 1 s each, in the order built-in, Python, Python,
 * built-in so a drift of the machine falls on both. Step time is the training phase from the server's history; the
 * Python calls' own workflows (`python:<round>/s<step>/rewards`) are counted and timed from theirs. Latency, not
 * clock cycles: on a clock a hop shorter than the cycle is hidden whole (the next submit still makes the next tick).
 */
export async function pythonHopBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const latencyMs = ctx.quick ? 200 : 1000;
  // Sums of 0..limit-1: the 16 of limit 4 leave 13 training rows, 4 steps of 4 prompts × 4 samples (limit 7, 10
  // steps a round, measured 1.012 on 2026-12-07 at e3c7398, 4 rounds and 271 s for one figure; limit 5, 1.011).
  const limit = 4;
  const order: Reward[] = ctx.quick ? ['builtin', 'python'] : ['builtin', 'python', 'python', 'builtin'];
  const label = `latency${latencyMs % 1000 === 0 ? `${latencyMs / 1000}s` : `${latencyMs}ms`}`;
  const taskQueue = `bench-python-hop-${Date.now()}`;
  const setup: HopSetup = {
    dataDir: fs.mkdtempSync(path.join(ctx.scratch, 'python-hop-')),
    limit,
    taskQueue,
    pythonQueue: `${taskQueue}-py`,
  };
  const emulator = await startBenchEmulator({ operationLatencyMs: latencyMs });
  let python: PythonWorker | undefined;
  try {
    python = await startPythonWorker({ address: ctx.settings.address!, taskQueue: setup.pythonQueue, sources: [NUMERIC_REWARD] });
    const runs = await withWorker(ctx, taskQueue, async () => {
      const done: Run[] = [];
      for (const [i, reward] of order.entries()) {
        const run = await hopRound(ctx, emulator.url, setup, reward, `python-hop-${reward}-${i}-${taskQueue}`);
        note(
          `python ${reward} round ${i + 1}/${order.length}: ${run.steps} steps in ${(run.trainingMs / 1000).toFixed(1)} s of training (${(run.trainingMs / run.steps).toFixed(0)} ms a step), ${run.roundEvents} round events, ${run.calls.length} Python calls`,
        );
        done.push(run);
      }
      return done;
    });
    reportHop(runs, `python.reward.${label}`, ctx.quick, report);
  } finally {
    await python?.stop();
    await emulator.close();
  }
}

interface HopSetup {
  dataDir: string;
  limit: number;
  taskQueue: string;
  pythonQueue: string;
}

/** One GRPO round with the given reward, measured from its history and its Python calls' histories. */
async function hopRound(ctx: BenchContext, baseUrl: string, setup: HopSetup, reward: Reward, campaignId: string): Promise<Run> {
  const rewardSpec = reward === 'python' ? `{ kind: python, name: numeric, taskQueue: ${setup.pythonQueue} }` : '{ kind: numeric }';
  const input = arithmeticRoundInput({
    baseUrl,
    campaignId,
    dir: setup.dataDir,
    limit: setup.limit,
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, loss: { type: importance_sampling }, reward: ${rewardSpec} } }`,
  });
  const workflowId = `round-${campaignId}`;
  const result: RoundResult = await ctx.client.workflow.execute(roundWorkflow, { taskQueue: setup.taskQueue, workflowId, args: [input] });
  if (result.status !== 'completed' || result.stepsApplied !== result.totalSteps)
    throw new Error(`the ${reward} round ended ${result.status} with ${result.stepsApplied}/${result.totalSteps} steps`);
  const phase = trainingPhase(await ctx.client.workflow.getHandle(workflowId).fetchHistory());
  const steps = (await readArtifact<{ steps: { meanReward: number }[] }>(result.reportPath)).steps;
  const calls = await pythonCalls(ctx, `python:${campaignId}/`);
  if (calls.length !== (reward === 'python' ? result.totalSteps : 0))
    throw new Error(`the ${reward} round made ${calls.length} Python calls over ${result.totalSteps} steps`);
  return {
    reward,
    steps: result.totalSteps,
    trainingMs: phase.ms,
    roundEvents: phase.totalEvents,
    trainingEvents: phase.events,
    meanRewards: steps.map((s) => s.meanReward),
    calls,
  };
}

function reportHop(runs: Run[], prefix: string, quick: boolean, report: Report): void {
  const of = (reward: Reward) => runs.filter((r) => r.reward === reward);
  const sum = (rs: Run[], f: (r: Run) => number) => rs.reduce((a, r) => a + f(r), 0);
  const [builtin, python] = [of('builtin'), of('python')];
  // Same data, seed and reward values: every round must have trained on the same rewards, or they did not do the same work.
  const rewards = JSON.stringify(runs[0]!.meanRewards);
  if (runs.some((r) => JSON.stringify(r.meanRewards) !== rewards))
    throw new Error(`the rounds' mean rewards differ: ${runs.map((r) => `${r.reward} ${JSON.stringify(r.meanRewards)}`).join('; ')}`);
  const perStep = (rs: Run[]) => sum(rs, (r) => r.trainingMs) / sum(rs, (r) => r.steps);
  const builtinMs = perStep(builtin);
  const pythonMs = perStep(python);
  const ratio = pythonMs / builtinMs;
  const pythonSteps = sum(python, (r) => r.steps);
  const calls = python.flatMap((r) => r.calls);
  const callEvents = calls.reduce((a, h) => a + (h.events?.length ?? 0), 0);
  report({ name: `${prefix}.builtin_ms_per_step`, value: builtinMs, target: 'info' });
  report({ name: `${prefix}.python_ms_per_step`, value: pythonMs, target: 'info' });
  report({ name: `${prefix}.added_ms_per_step`, value: pythonMs - builtinMs, target: 'info' });
  report({ name: `${prefix}.python_call_ms`, value: mean(calls.map(callSpan)), target: 'info; workflow started → completed' });
  report({ name: `${prefix}.python_dispatch_ms`, value: mean(calls.map(dispatchSpan)), target: 'info; activity scheduled → started' });
  report({
    name: `${prefix}.python_activity_ms`,
    value: mean(calls.map(activitySpan)),
    target: 'info; the Python activity started → completed',
  });
  report({ name: `${prefix}.python_calls_per_step`, value: calls.length / pythonSteps, target: 'info' });
  report({ name: `${prefix}.python_call_events_per_step`, value: callEvents / pythonSteps, target: 'info; in the calls’ own histories' });
  const perRound = (rs: Run[], f: (r: Run) => number) => sum(rs, f) / rs.length;
  report({
    name: `${prefix}.round_events_added`,
    value: perRound(python, (r) => r.roundEvents) - perRound(builtin, (r) => r.roundEvents),
    target: `info; in training: ${perRound(python, (r) => r.trainingEvents) - perRound(builtin, (r) => r.trainingEvents)}`,
  });
  report({
    name: `${prefix}.python_over_builtin`,
    value: ratio,
    target: quick ? `≤ ${TARGET} at 1 s operations` : `≤ ${TARGET}`,
    met: ratio <= TARGET,
  });
}

/** Every `pythonCallWorkflow` whose id starts with `prefix`, with its history. */
async function pythonCalls(ctx: BenchContext, prefix: string): Promise<History[]> {
  const histories: History[] = [];
  for await (const w of ctx.client.workflow.list({ query: `WorkflowType = 'pythonCallWorkflow'` }))
    if (w.workflowId.startsWith(prefix)) histories.push(await ctx.client.workflow.getHandle(w.workflowId).fetchHistory());
  return histories;
}

function eventMs(history: History, type: number): number {
  const t = history.events?.find((e) => e.eventType === type)?.eventTime;
  if (!t) throw new Error(`a Python call's history has no event of type ${type}`);
  return Number(t.seconds ?? 0) * 1000 + (t.nanos ?? 0) / 1e6;
}

const callSpan = (h: History) => eventMs(h, EVENT.workflowCompleted) - eventMs(h, EVENT.workflowStarted);
const dispatchSpan = (h: History) => eventMs(h, EVENT.activityStarted) - eventMs(h, EVENT.activityScheduled);
const activitySpan = (h: History) => eventMs(h, EVENT.activityCompleted) - eventMs(h, EVENT.activityStarted);
const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);

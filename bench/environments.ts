import fs from 'node:fs';
import path from 'node:path';
import type { temporal } from '@temporalio/proto';
import { tokenizerFor } from '../config/io/tokenizer';
import { roundFiles } from '../config/rules/round-files';
import type { Datum, TrainingProvider } from '../providers/types';
import { NUMBER_GAME } from '../test/helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../test/helpers/python-worker';
import { arithmeticRoundInput } from '../test/helpers/round';
import { roundWorkflow } from '../workflows';
import type { RoundResult } from '../workflows/round/contract';
import { directProvider } from './direct';
import { note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';

type History = temporal.api.history.v1.IHistory;

const ON_POLICY_TARGET = 1.05;
const OFF_POLICY_TARGET = 1.1;
const MODEL = 'roundhouse/tiny-chat';
const GROUPS = 4;
const GROUP_SIZE = 4;
const TURNS = 3;

/**
 * A multi-turn GRPO step against its physical limit, on the clock-cycle emulator (every operation completes on the
 * first tick after it was submitted, as hosted trainers batch work). The round plays the verifiers number game
 * (test/python/vf_number_game.py: 3 model turns an episode, 4 prompts × 4 episodes a step) on a real Python worker
 * through the sampler gateway, once on-policy and once one step off-policy (`maxStepsOffPolicy: 1`, ppo). The
 * physical limit is measured on the same emulator by a plain loop with the same client: per step, the weights
 * synced to the sampler, then 16 episodes of 3 turns drawn turn by turn (each turn one sampling request, the 16
 * episodes at once), then forward-backward and optimizer step submitted back to back. Its `sample` is the turns,
 * its `train` the forward-backward, optimizer step and sync: on-policy the limit is sample + train, off-policy
 * max(sample, train). History events per episode are counted in the round's and its Python calls' histories.
 */
export async function environmentsBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const cycleMs = ctx.quick ? 300 : 1000;
  // Sums of 0..limit-1: limit 7 leaves 39 training rows, 10 steps of 4 prompts; limit 4, 4 steps. Both ratios need
  // the steps: a missed clock tick costs 1000 ms ÷ steps a step, and the off-policy one carries the pipeline's fill.
  // On 2026-12-07, 5 steps measured off-policy 1.092 (goal 1.1) and 8 steps on-policy 1.040 and 1.063 (goal 1.05).
  const limit = ctx.quick ? 4 : 7;
  const label = `clock${cycleMs}ms`;
  const taskQueue = `bench-environments-${Date.now()}`;
  const pythonQueue = `${taskQueue}-py`;
  const dataDir = fs.mkdtempSync(path.join(ctx.scratch, 'environments-'));
  const emulator = await startBenchEmulator({ clockCycleMs: cycleMs });
  let python: PythonWorker | undefined;
  try {
    python = await startPythonWorker({ address: ctx.settings.address!, taskQueue: pythonQueue, sources: [NUMBER_GAME] });
    const runs = await withWorker(ctx, taskQueue, async () => {
      const done: EnvironmentRun[] = [];
      for (const mode of ['on', 'off'] as const) {
        const run = await environmentRound(ctx, { baseUrl: emulator.url, dataDir, limit, taskQueue, pythonQueue, mode });
        note(
          `environments ${mode}-policy: ${run.steps} steps in ${(run.trainingMs / 1000).toFixed(1)} s (${(run.trainingMs / run.steps).toFixed(0)} ms a step), ${run.episodes} episodes, fewest turns in a step's longest episode ${run.minLongestTurns}, ${run.roundEvents} round events, ${run.callEvents} Python call events`,
        );
        done.push(run);
      }
      return done;
    });
    const steps = runs[0]!.steps;
    const limitLoop = await physicalLimit(emulator.url, steps, `${label}-${Date.now()}`);
    note(
      `environments physical limit: ${steps} steps, sample ${limitLoop.sampleMs.toFixed(0)} ms + train ${limitLoop.trainMs.toFixed(0)} ms a step (loop ${limitLoop.stepMs.toFixed(0)} ms a step)`,
    );
    const [on, off] = runs as [EnvironmentRun, EnvironmentRun];
    const perStep = (r: EnvironmentRun) => r.trainingMs / r.steps;
    const prefix = `environments.${label}`;
    report({ name: `${prefix}.sample_ms_per_step`, value: limitLoop.sampleMs, target: `info; ${TURNS} turns, one cycle each` });
    report({
      name: `${prefix}.train_ms_per_step`,
      value: limitLoop.trainMs,
      target: 'info; forward-backward + optimizer step, weights sync',
    });
    report({ name: `${prefix}.on_policy_ms_per_step`, value: perStep(on), target: 'info' });
    report({ name: `${prefix}.off_policy_ms_per_step`, value: perStep(off), target: 'info' });
    const onRatio = perStep(on) / limitLoop.stepMs;
    report({
      name: `${prefix}.on_policy_over_sample_plus_train`,
      value: onRatio,
      target: `≤ ${ON_POLICY_TARGET}`,
      met: onRatio <= ON_POLICY_TARGET,
    });
    const offRatio = perStep(off) / Math.max(limitLoop.sampleMs, limitLoop.trainMs);
    report({
      name: `${prefix}.off_policy_over_max_sample_train`,
      value: offRatio,
      target: `≤ ${OFF_POLICY_TARGET}`,
      met: offRatio <= OFF_POLICY_TARGET,
    });
    for (const run of runs) {
      const name = `${prefix}.${run.mode}_policy`;
      report({
        name: `${name}.events_per_episode`,
        value: (run.trainingEvents + run.callEvents) / run.episodes,
        target: `info; the round's training events and its Python calls', over ${run.episodes} episodes`,
      });
      report({
        name: `${name}.round_events_per_step`,
        value: run.trainingEvents / run.steps,
        target: `info; ${GROUPS * GROUP_SIZE} episodes a step`,
      });
      report({ name: `${name}.python_call_events_per_step`, value: run.callEvents / run.steps, target: `info; ${run.calls} calls` });
    }
  } finally {
    await python?.stop();
    await emulator.close();
  }
}

interface EnvironmentRun {
  mode: 'on' | 'off';
  steps: number;
  episodes: number;
  trainingMs: number;
  trainingEvents: number;
  roundEvents: number;
  calls: number;
  callEvents: number;
  /** The fewest model turns of the longest episode of any step (3 when every step played a full episode). */
  minLongestTurns: number;
}

async function environmentRound(
  ctx: BenchContext,
  o: { baseUrl: string; dataDir: string; limit: number; taskQueue: string; pythonQueue: string; mode: 'on' | 'off' },
): Promise<EnvironmentRun> {
  const campaignId = `environments-${o.mode}-${o.taskQueue}`;
  const loss = o.mode === 'on' ? 'loss: { type: importance_sampling }' : 'loss: { type: ppo }, maxStepsOffPolicy: 1';
  const input = arithmeticRoundInput({
    baseUrl: o.baseUrl,
    campaignId,
    dir: o.dataDir,
    limit: o.limit,
    yaml: `training: { epochs: 1, batchSize: ${GROUPS}, learningRate: 0.02, loraRank: 8, maxSeqLen: 128 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: ${GROUP_SIZE}, ${loss}, environment: { kind: verifiers, name: vf_number_game, args: { turns: ${TURNS} }, taskQueue: ${o.pythonQueue} } } }`,
  });
  const workflowId = `round-${campaignId}`;
  const result: RoundResult = await ctx.client.workflow.execute(roundWorkflow, { taskQueue: o.taskQueue, workflowId, args: [input] });
  if (result.status !== 'completed' || result.stepsApplied !== result.totalSteps)
    throw new Error(`the ${o.mode}-policy round ended ${result.status} with ${result.stepsApplied}/${result.totalSteps} steps`);
  const phase = trainingPhase(await ctx.client.workflow.getHandle(workflowId).fetchHistory());
  const calls = await pythonCalls(ctx, `python:${campaignId}/`);
  if (calls.length !== result.totalSteps) throw new Error(`the round made ${calls.length} Python calls over ${result.totalSteps} steps`);
  const samples = stepSamples(roundFiles(input.reportDir, input.round).samples());
  return {
    mode: o.mode,
    steps: result.totalSteps,
    episodes: samples.reduce((a, s) => a + s.episodes, 0),
    trainingMs: phase.ms,
    trainingEvents: phase.events,
    roundEvents: phase.totalEvents,
    calls: calls.length,
    callEvents: calls.reduce((a, h) => a + (h.events?.length ?? 0), 0),
    minLongestTurns: Math.min(...samples.map((s) => s.longest)),
  };
}

interface StepFile {
  groups: { completions: { episode?: { turns: unknown[] } }[] }[];
}

/** Per step file of the round: its episodes and the turns of its longest one. */
function stepSamples(dir: string): { episodes: number; longest: number }[] {
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^s\d+\.json$/.test(f)) : [];
  if (files.length === 0) throw new Error(`no step samples under ${dir}`);
  const out: { episodes: number; longest: number }[] = [];
  for (const f of files) {
    const step = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as StepFile;
    const episodes = step.groups.flatMap((g) => g.completions);
    out.push({ episodes: episodes.length, longest: Math.max(...episodes.map((c) => c.episode?.turns.length ?? 0)) });
  }
  return out;
}

/** Every `pythonCallWorkflow` whose id starts with `prefix`, with its history. */
async function pythonCalls(ctx: BenchContext, prefix: string): Promise<History[]> {
  const histories: History[] = [];
  for await (const w of ctx.client.workflow.list({ query: `WorkflowType = 'pythonCallWorkflow'` }))
    if (w.workflowId.startsWith(prefix)) histories.push(await ctx.client.workflow.getHandle(w.workflowId).fetchHistory());
  return histories;
}

/**
 * The physical limit of a multi-turn step on this emulator, by a plain loop with the worker's client: the weights
 * synced, every episode's turns drawn one after another (each turn's prompt the previous prompt and completion),
 * then forward-backward and optimizer step back to back. Means per step.
 */
async function physicalLimit(
  baseUrl: string,
  steps: number,
  label: string,
): Promise<{ sampleMs: number; trainMs: number; stepMs: number }> {
  const provider: TrainingProvider = directProvider({ kind: 'local', baseUrl });
  const tokenizer = tokenizerFor(MODEL, undefined);
  const resource = await provider.provision({ model: MODEL, ownerTag: `bench-environments-${label}`, inactiveTimeoutSeconds: 600 });
  try {
    await provider.waitReady(resource.id, { timeoutMs: 120_000 });
    const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7, displayName: `bench-env-${label}` });
    const key = (step: number, op: string) => `bench-env-${label}/s${step}/${op}`;
    let sampleMs = 0;
    let trainMs = 0;
    const started = performance.now();
    for (let step = 0; step < steps; step++) {
      const t0 = performance.now();
      await provider.awaitOperation(await provider.submitWeightsSync(session.id, key(step, 'sync')));
      const t1 = performance.now();
      const episodes = await Promise.all(
        Array.from({ length: GROUPS * GROUP_SIZE }, async (_, e) => {
          let prompt = tokenizer.encode(tokenizer.renderChat([{ role: 'user', content: `What is ${step} + ${e}?` }], true));
          const datum: Datum = { modelInput: [], targetTokens: [], weights: [] };
          for (let turn = 0; turn < TURNS; turn++) {
            const [result] = await provider.awaitOperation(
              await provider.submitSample(session.id, key(step, `e${e}t${turn}`), [prompt], {
                maxTokens: 3,
                temperature: 1,
                seed: step * 1000 + e * 10 + turn,
              }),
            );
            const tokens = result!.sequences[0]?.tokens ?? [];
            prompt = [...prompt, ...tokens, ...tokenizer.encode('Another number?')];
            datum.modelInput = prompt.slice(0, -1);
            datum.targetTokens = prompt.slice(1);
          }
          datum.weights = datum.targetTokens.map(() => 1);
          return datum;
        }),
      );
      const t2 = performance.now();
      const fb = await provider.submitForwardBackward(session.id, key(step, 'fb'), episodes);
      const opt = await provider.submitOptimStep(session.id, key(step, 'opt'), { learningRate: 0.02 });
      await provider.awaitOperation(fb);
      await provider.awaitOperation(opt);
      const t3 = performance.now();
      sampleMs += t2 - t1;
      trainMs += t3 - t2 + (t1 - t0);
    }
    const stepMs = (performance.now() - started) / steps;
    await provider.closeSession(session.id).catch(() => undefined);
    return { sampleMs: sampleMs / steps, trainMs: trainMs / steps, stepMs };
  } finally {
    await provider.deactivate(resource.id).catch(() => undefined);
    await provider.close();
  }
}

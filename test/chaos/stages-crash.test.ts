import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { parseCampaignSpec, type CampaignSpec } from '../../config/io/spec';
import { seededRandom } from '../../config/rules/random';
import { writeArithmeticData } from '../../examples/arithmetic/generate';
import { campaignProgressQuery, type CampaignInput, type CampaignProgress, type CampaignResult } from '../../workflows/campaign/contract';
import type { RoundProgress } from '../../workflows/round/contract';
import { campaignWorkflow } from '../../workflows';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { progressOf } from '../helpers/round';
import { TRAINING_ACTIVITY } from '../helpers/running-activities';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, KillSequence, startWorkerProcess } from '../helpers/worker-process';

// A staged campaign (SFT, then GRPO from the SFT stage's final checkpoint) under SIGKILLs of real worker processes at
// the stage boundary and inside the GRPO stage's training: every round applies exactly its planned steps, once, the
// GRPO round's trainer loads the SFT stage's checkpoint, and nothing is left holding a GPU.

let temporal: TestTemporal;
let bundleFile: string;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
});

afterAll(async () => {
  await temporal?.close();
});

/** 80 training sums: SFT 4 epochs (40 steps, enough to earn GRPO some reward), then GRPO 2 epochs (20 steps). */
const PLANNED = { sft: 40, grpo: 20 };

function sftThenGrpo(baseUrl: string): { spec: CampaignSpec; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-stages-crash-'));
  writeArithmeticData(dir);
  const yaml = `
name: stages-crash
provider: { kind: local, baseUrl: "${baseUrl}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
evaluation: { scorer: numeric }
advanced: { heartbeatTimeoutSeconds: 2 }
stages:
  - name: warmup
    training: { epochs: 4, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 10 }
    sampling: { maxTokens: 3, temperature: 0 }
  - name: rl
    training: { epochs: 2, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: ppo }, maxStepsOffPolicy: 1 } }
`;
  const file = path.join(dir, 'campaign.yaml');
  fs.writeFileSync(file, yaml);
  return { spec: parseCampaignSpec(yaml, file), dir };
}

/** A campaign's progress, or undefined while no worker can answer the query (between a kill and a restart). */
async function campaignProgressOf(handle: WorkflowHandle): Promise<CampaignProgress | undefined> {
  try {
    return await handle.query(campaignProgressQuery);
  } catch {
    return undefined;
  }
}

test('SFT → GRPO: SIGKILL of the worker as the SFT round releases its trainer, at the stage boundary and inside GRPO training: each round applies exactly its planned steps, GRPO starts from the SFT checkpoint, nothing left active', async () => {
  const emulator: RunningEmulator = await startTestEmulator({ provisioningDelayMs: 1000, operationLatencyMs: 10 });
  // The SFT round's release is slow enough to be caught and killed in: its trainer's stop (the run's first) waits.
  await setFaults(emulator, { rules: [{ kind: 'delay', method: 'POST', path: '/model-resources/[^/]+/stop$', delayMs: 1500, max: 1 }] });
  const taskQueue = uniqueTaskQueue('crash-stages');
  const campaignId = `crash-stages-${taskQueue}`;
  const { spec, dir } = sftThenGrpo(emulator.url);
  const env = crashTestWorkerEnv(taskQueue, bundleFile);
  const random = seededRandom(20261205); // seeded, so a failing run can be replayed
  const startedAt = Date.now();
  const log = (line: string) => process.stderr.write(`[crash stages +${((Date.now() - startedAt) / 1000).toFixed(1)} s] ${line}\n`);
  const sequence = new KillSequence(startWorkerProcess(env), env, log);
  try {
    await sequence.worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(path.join(dir, 'reports')) } satisfies CampaignInput],
    });
    const sftRound = temporal.client.workflow.getHandle(`${campaignId}-round-1`);
    const grpoRound = temporal.client.workflow.getHandle(`${campaignId}-round-2`);

    // The SFT round finishing: releasing its trainer, its result not yet the campaign's. The round's own query shows
    // its cleanup (the campaign hears of the round again only once it is over).
    await sequence.at<RoundProgress>(
      { name: 'SFT round releasing its trainer', when: (p) => p.phase === 'cleanup', inside: { activity: /^releaseTrainer$/ } },
      {
        progress: () => progressOf(sftRound),
        workflow: sftRound,
        describe: (p) => `SFT round phase ${p.phase}`,
        beyond: (p) => ['completed', 'failed', 'cancelled'].includes(p.phase),
      },
    );
    // The stage boundary: the SFT round recorded and the GRPO stage's record made, its round not yet trained (the
    // campaign continuing as new, starting the round, or the round provisioning a trainer from the SFT checkpoint).
    // When the worker killed there died, proven below against the histories.
    const atBoundary = sequence.worker;
    let boundaryKilledAt: number | undefined;
    atBoundary.child.once('exit', () => (boundaryKilledAt ??= Date.now()));
    await sequence.at<CampaignProgress>(
      {
        name: 'GRPO stage recorded, its round not yet trained',
        when: (p) =>
          p.rounds.length === 1 &&
          p.stages?.length === 2 &&
          (p.currentRound === undefined || ['validating', 'provisioning'].includes(p.currentRound.phase)),
      },
      {
        progress: () => campaignProgressOf(handle),
        describe: (p) =>
          `${p.rounds.length} round recorded, ${p.stages?.length} stages, round ${p.currentRound?.round ?? '-'} ${p.currentRound?.phase ?? 'not started'}`,
        beyond: (p) => p.rounds.length >= 1,
      },
    );
    // Inside the GRPO round's training, after the hand-off: in its second segment or later.
    await sequence.at<RoundProgress>(
      { name: 'GRPO training ≥ step 5', when: (p) => p.phase === 'training', inside: { activity: TRAINING_ACTIVITY, fromStep: 5 } },
      {
        progress: () => progressOf(grpoRound),
        workflow: grpoRound,
        describe: (p) => `GRPO round phase ${p.phase}, step ${p.step}`,
        beyond: (p) => ['checkpointing', 'sampling', 'evaluating', 'cleanup', 'completed', 'failed', 'cancelled'].includes(p.phase),
        jitterMs: () => Math.floor(random() * 250), // land inside a step
      },
    );
    const result: CampaignResult = await handle.result();
    log(`campaign done; ${sequence.kills.length} kills: ${sequence.kills.join('; ')}`);
    expect(sequence.missed).toEqual([]);

    expect(result.status).toBe('completed');
    expect(result.rounds).toHaveLength(2);
    const [sft, grpo] = result.rounds;
    expect(sft).toMatchObject({ stage: 1, kind: 'sft', status: 'completed', stepsApplied: PLANNED.sft, totalSteps: PLANNED.sft });
    expect(grpo).toMatchObject({ stage: 2, kind: 'grpo', status: 'completed', stepsApplied: PLANNED.grpo, totalSteps: PLANNED.grpo });
    const sftCheckpoint = sft!.trainingCheckpointId!;
    expect(sftCheckpoint).toBeTruthy();
    expect(result.stages).toMatchObject([
      { stage: 1, name: 'warmup', kind: 'sft', firstRound: 1, rounds: 1, passedOn: sftCheckpoint },
      { stage: 2, name: 'rl', kind: 'grpo', firstRound: 2, rounds: 1, startedFrom: sftCheckpoint, loadOptimizer: false },
    ]);
    // The boundary kill landed between the stages: after the SFT round had closed, before the GRPO round opened its
    // session from the SFT checkpoint (the hand-off); and the hand-off was made once: one openTrainingSession scheduled
    // for the round's own session, which the ledger shows loading the SFT checkpoint (below).
    const sftClosedAt = (await sftRound.describe()).closeTime!.getTime();
    const grpoEvents = (await grpoRound.fetchHistory()).events!;
    const opened = grpoEvents
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'openTrainingSession')
      .map((e) => ({ at: tsToMs(e.eventTime), input: JSON.stringify(e.activityTaskScheduledEventAttributes!.input) }));
    const grpoStartedAt = tsToMs(grpoEvents[0]!.eventTime);
    log(
      `boundary kill: ${boundaryKilledAt! - sftClosedAt} ms after the SFT round closed, ${opened[0]!.at - boundaryKilledAt!} ms before the hand-off; ` +
        `the GRPO round ${grpoStartedAt > boundaryKilledAt! ? 'not yet started' : `started ${boundaryKilledAt! - grpoStartedAt} ms before`}`,
    );
    expect(boundaryKilledAt).toBeGreaterThan(sftClosedAt);
    expect(boundaryKilledAt).toBeLessThan(opened[0]!.at);
    expect(opened.filter((o) => o.input === opened[0]!.input)).toHaveLength(1);
    // One round workflow per stage, never two.
    const rounds: string[] = [];
    for await (const w of temporal.client.workflow.list({ query: `WorkflowType = 'roundWorkflow' AND TaskQueue = '${taskQueue}'` }))
      rounds.push(w.workflowId);
    expect(rounds.sort()).toEqual([sft!.workflowId, grpo!.workflowId]);

    // Exact steps in each round, counted on every session its trainers held (a re-provisioned trainer's too).
    const l = await ledger(emulator);
    const sessionsOf = (workflowId: string) => l.sessions.filter((s) => s.displayName === `roundhouse:${workflowId}`);
    const stepsOf = (workflowId: string) => sessionsOf(workflowId).reduce((a, s) => a + s.optimizerSteps, 0);
    expect(stepsOf(sft!.workflowId)).toBe(PLANNED.sft);
    expect(stepsOf(grpo!.workflowId)).toBe(PLANNED.grpo);
    expect(l.totals.optimizerSteps).toBe(PLANNED.sft + PLANNED.grpo); // no other session trained
    expect(l.active).toEqual([]);
    // The GRPO trainer loaded the SFT stage's final checkpoint, weights only: its step counter starts at 0, not at 40.
    expect(sessionsOf(grpo!.workflowId)).toMatchObject([{ resumedFromCheckpoint: sftCheckpoint, step: PLANNED.grpo }]);
    const report = await readArtifact(grpo!.reportPath);
    expect(report.started_from_checkpoint).toBe(sftCheckpoint);
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: PLANNED.grpo }, (_v, i) => i + 1));
    // The warm start earns reward, so GRPO steps carry gradients: a round of tied groups would be exact trivially.
    const rewarded = report.steps.filter((s: { groupsKept: number }) => s.groupsKept > 0).length;
    log(
      `SFT accuracy ${sft!.accuracy}; GRPO reward ${grpo!.firstReward} → ${grpo!.meanReward}; ${rewarded} of ${PLANNED.grpo} steps kept a group`,
    );
    expect(rewarded).toBeGreaterThan(0);
  } finally {
    await sequence.worker.stop();
    await emulator.close();
  }
}, 300_000);

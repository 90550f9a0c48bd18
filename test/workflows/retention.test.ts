import { applyRetention, referencedCheckpoints, type RetentionReport } from '../../activities/retention';
import { checkpointRefsMemo } from '../../config/retention';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import { campaignWorkflow } from '../../workflows';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign-contract';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, togetherProvider } from '../helpers/emulator';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Checkpoint retention on a real dev server: a four-round campaign keeps its best and last rounds' checkpoints; then a
// schedule and an open workflow start from two of the expendable ones, and a retention pass with a provider that
// can delete deletes every expendable checkpoint except those two.

const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, TINKER_API_KEY: 'tml-retention-key' });

test('retention keeps the best and last rounds, never deletes what a schedule or an open workflow starts from', async () => {
  const taskQueue = uniqueTaskQueue('retention');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: 'rounds: { max: 4, nextData: { policy: all } }\nretention: { keepBest: 1, keepLast: 1 }',
  });
  const campaignId = `retention-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(dir) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed', 'completed', 'completed']);
  const campaignDir = result.summaryPath.replace(/\/campaign\.json$/, '');
  const applied = await readArtifact<RetentionReport>(`${campaignDir}/retention.json`);
  // The campaign's own pass: the last round's and the best round's final checkpoints kept, the others' expendable.
  const best = [...result.rounds].sort((a, b) => (b.accuracy ?? 0) - (a.accuracy ?? 0) || (a.trainedLoss ?? 0) - (b.trainedLoss ?? 0))[0]!;
  const keptRounds = [...new Set(applied.kept.map((c) => c.round))].sort();
  expect(keptRounds).toEqual([...new Set([best.round, 4])].sort());
  expect(applied.kept.find((c) => c.round === 4 && c.kind === 'training')!.reasons).toContain('last');
  expect(applied.provider_deletes).toBe(false); // the emulator speaks Together's API, which has no delete call
  expect(applied.note).toMatch(/no checkpoint delete call/);
  const expendable = applied.expendable.filter((c) => c.kind === 'training');
  expect(expendable.length).toBeGreaterThanOrEqual(2);
  expect(applied.expendable.every((c) => !c.deleted)).toBe(true);

  // A paused schedule whose campaign starts from one expendable checkpoint, an open workflow from another.
  const [scheduled, running] = [expendable[0]!.checkpoint_id, expendable[1]!.checkpoint_id];
  const scheduleId = `retention-schedule-${taskQueue}`;
  const schedule = await env.temporal.client.schedule.create({
    scheduleId,
    spec: { intervals: [{ every: '1 day' }] },
    state: { paused: true },
    action: {
      type: 'startWorkflow',
      workflowType: campaignWorkflow,
      taskQueue: `${taskQueue}-nowhere`,
      args: [{ ...input, spec: { ...spec, rounds: { ...spec.rounds, startFrom: { checkpointId: scheduled, loadOptimizer: false } } } }],
    },
  });
  const idle = await env.temporal.client.workflow.start(campaignWorkflow, {
    taskQueue: `${taskQueue}-nowhere`, // no worker: it stays open, its memo naming the checkpoint it starts from
    workflowId: `retention-open-${taskQueue}`,
    args: [input],
    memo: checkpointRefsMemo([running]),
  });
  try {
    for (let i = 0; i < 100; i++) {
      const refs = await referencedCheckpoints(env.temporal.client);
      if (refs.has(scheduled) && refs.has(running)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // A provider that can delete (Together's API cannot; Tinker's can, #20): every call it gets is recorded.
    const provider = togetherProvider(env.emulator, LOCAL_EMULATOR_KEY);
    const deleted: string[] = [];
    const deleting = Object.assign(Object.create(provider) as typeof provider, {
      deleteCheckpoint: async (id: string) => void deleted.push(id),
    });
    const report = await applyRetention({
      campaignDir,
      rule: { keepBest: 1, keepLast: 1 },
      client: env.temporal.client,
      own: [],
      provider: deleting,
    });
    expect(deleted).not.toContain(scheduled);
    expect(deleted).not.toContain(running);
    expect(report.kept.find((c) => c.checkpoint_id === scheduled)).toMatchObject({
      reasons: ['referenced'],
      referenced_by: [`schedule ${scheduleId}`],
    });
    expect(report.kept.find((c) => c.checkpoint_id === running)).toMatchObject({
      reasons: ['referenced'],
      referenced_by: [`workflow ${idle.workflowId}`],
    });
    // Everything else expendable was deleted; nothing kept was.
    expect(deleted.sort()).toEqual(report.expendable.map((c) => c.checkpoint_id).sort());
    expect(report.expendable.every((c) => c.deleted)).toBe(true);
    for (const c of report.kept) expect(deleted).not.toContain(c.checkpoint_id);
    expect((await readArtifact<RetentionReport>(`${campaignDir}/retention.json`)).expendable.map((c) => c.checkpoint_id).sort()).toEqual(
      deleted.sort(),
    );
    await provider.close();
  } finally {
    await schedule.delete();
    await idle.terminate('test over');
  }
}, 240_000);

test('on Tinker, whose API deletes checkpoints, the campaign’s own retention pass deletes the expendable ones at the provider and keeps the rest', async () => {
  const taskQueue = uniqueTaskQueue('retention-tinker');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: 'rounds: { max: 3, nextData: { policy: all } }\nretention: { keepBest: 1, keepLast: 1 }',
  });
  spec.provider = { ...spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  const campaignId = `retention-tinker-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(dir) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
  const campaignDir = result.summaryPath.replace(/\/campaign\.json$/, '');
  const applied = await readArtifact<RetentionReport>(`${campaignDir}/retention.json`);
  expect(applied.provider_deletes).toBe(true);
  expect(applied.expendable.length).toBeGreaterThanOrEqual(2);
  expect(applied.expendable.every((c) => c.deleted)).toBe(true);
  // At the provider: every expendable checkpoint is gone, every kept one is there.
  const l = await ledger(env.emulator);
  const paths = new Set(
    l.checkpoints.map((c) => `tinker://${c.resourceId}/${c.type === 'training' ? 'weights' : 'sampler_weights'}/${c.name}`),
  );
  for (const c of applied.expendable) expect(paths.has(c.checkpoint_id)).toBe(false);
  for (const c of applied.kept) expect(paths.has(c.checkpoint_id)).toBe(true);
}, 240_000);

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { applyRetention, referencedCheckpoints, type OpenWitness, type RetentionReport } from '../../activities/retention';
import { joinLocation, writeJson } from '../../config/io/artifacts';
import { checkpointRefsMemo } from '../../config/rules/retention';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import { campaignWorkflow } from '../../workflows';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, togetherProvider } from '../helpers/emulator';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Checkpoint retention on a real dev server: a four-round campaign keeps its best and last rounds' checkpoints; then
// passes over its checkpoints with a provider that can delete (the real HTTP provider with a recording
// `deleteCheckpoint`) keep what a schedule or an open workflow starts from, and delete nothing when the reference scan
// is truncated, fails, or does not list the workflow known to run the pass.

const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, TINKER_API_KEY: 'tml-retention-key' });
const RULE = { keepBest: 1, keepLast: 1 };

interface RetentionCampaign {
  input: CampaignInput;
  taskQueue: string;
  result: CampaignResult;
  campaignDir: string;
  /** The campaign's own pass (retention.json as the campaign wrote it). */
  applied: RetentionReport;
}

/** A campaign of `rounds` rounds with `retention: { keepBest: 1, keepLast: 1 }`, on the emulator (Together's API unless `kind`). */
async function retentionCampaign(label: string, rounds: number, kind?: 'tinker'): Promise<RetentionCampaign> {
  const taskQueue = uniqueTaskQueue(label);
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: `rounds: { max: ${rounds}, nextData: { policy: all } }\nretention: { keepBest: 1, keepLast: 1 }`,
  });
  if (kind) spec.provider = { ...spec.provider, kind, baseUrl: env.emulator.url };
  const campaignId = `${label}-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(dir) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  const campaignDir = result.summaryPath.replace(/\/campaign\.json$/, '');
  return { input, taskQueue, result, campaignDir, applied: await readArtifact<RetentionReport>(`${campaignDir}/retention.json`) };
}

let fourRounds: Promise<RetentionCampaign> | undefined;
/** One four-round campaign, run once for the tests that share it. */
const fourRoundCampaign = () => (fourRounds ??= retentionCampaign('retention', 4));

/** A directory holding only the campaign's summary: a retention pass there starts with no retention.json. */
async function copyOfCampaign(campaignDir: string): Promise<string> {
  const dir = testReportDir(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-retention-')));
  await writeJson(joinLocation(dir, 'campaign.json'), await readArtifact(joinLocation(campaignDir, 'campaign.json')));
  return dir;
}

/** A campaign workflow with no worker (it stays open), memo naming `startsFrom`; returned once visibility lists it. */
async function openWorkflow(input: CampaignInput, label: string, startsFrom: string[] = []) {
  const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
    taskQueue: uniqueTaskQueue('retention-nowhere'),
    workflowId: `retention-${label}-${uniqueTaskQueue('open')}`,
    args: [input],
    memo: checkpointRefsMemo(startsFrom),
  });
  await listedByVisibility(handle.workflowId);
  return handle;
}

async function listedByVisibility(workflowId: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    for await (const w of env.temporal.client.workflow.list({ query: `WorkflowId = '${workflowId}' AND CloseTime IS NULL` }))
      if (w.workflowId === workflowId) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${workflowId} never listed by visibility`);
}

const witnessOf = (h: { workflowId: string; firstExecutionRunId: string }): OpenWitness => ({
  workflowId: h.workflowId,
  runId: h.firstExecutionRunId,
});

/** The real HTTP provider with a delete call that records what it is asked to delete (and may act first). */
function deletingProvider(beforeEach?: (id: string) => Promise<void>) {
  const provider = togetherProvider(env.emulator, LOCAL_EMULATOR_KEY);
  const deleted: string[] = [];
  const deleting = Object.assign(Object.create(provider) as typeof provider, {
    deleteCheckpoint: async (id: string) => {
      await beforeEach?.(id);
      deleted.push(id);
    },
  });
  return { provider: deleting, deleted, close: () => provider.close() };
}

/** A paused schedule whose campaign starts from `checkpointId`. */
function scheduleStartingFrom(input: CampaignInput, taskQueue: string, checkpointId: string) {
  return env.temporal.client.schedule.create({
    scheduleId: `retention-schedule-${uniqueTaskQueue(taskQueue)}`,
    spec: { intervals: [{ every: '1 day' }] },
    state: { paused: true },
    action: {
      type: 'startWorkflow',
      workflowType: campaignWorkflow,
      taskQueue: `${taskQueue}-nowhere`,
      args: [{ ...input, spec: { ...input.spec, rounds: { ...input.spec.rounds, startFrom: { checkpointId, loadOptimizer: false } } } }],
    },
  });
}

test('retention keeps the best and last rounds, never deletes what a schedule or an open workflow starts from', async () => {
  const { input, taskQueue, result, campaignDir, applied } = await fourRoundCampaign();
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed', 'completed', 'completed']);
  // The campaign's own pass: the last round's and the best round's final checkpoints kept, the others' expendable.
  const best = [...result.rounds].sort((a, b) => (b.accuracy ?? 0) - (a.accuracy ?? 0) || (a.trainedLoss ?? 0) - (b.trainedLoss ?? 0))[0]!;
  const keptRounds = [...new Set(applied.kept.map((c) => c.round))].sort();
  expect(keptRounds).toEqual([...new Set([best.round, 4])].sort());
  expect(applied.kept.find((c) => c.round === 4 && c.kind === 'training')!.reasons).toContain('last');
  expect(applied.provider_deletes).toBe(false); // the emulator speaks Together's API, which has no delete call
  expect(applied.note).toMatch(/no checkpoint delete call/);
  expect(applied.held).toBeUndefined(); // the campaign's own scan listed the campaign
  const expendable = applied.expendable.filter((c) => c.kind === 'training');
  expect(expendable.length).toBeGreaterThanOrEqual(2);
  expect(applied.expendable.every((c) => !c.deleted)).toBe(true);

  // A paused schedule whose campaign starts from one expendable checkpoint, an open workflow from another.
  const [scheduled, running] = [expendable[0]!.checkpoint_id, expendable[1]!.checkpoint_id];
  const schedule = await scheduleStartingFrom(input, taskQueue, scheduled);
  const idle = await openWorkflow(input, 'idle', [running]);
  const { provider, deleted, close } = deletingProvider();
  try {
    for (let i = 0; i < 100; i++) {
      const { referencedBy } = await referencedCheckpoints(env.temporal.client, { witness: witnessOf(idle) });
      if (referencedBy.has(scheduled) && referencedBy.has(running)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const report = await applyRetention({
      campaignDir,
      rule: RULE,
      client: env.temporal.client,
      witness: witnessOf(idle),
      own: [],
      provider,
    });
    expect(report.held).toBeUndefined();
    expect(deleted).not.toContain(scheduled);
    expect(deleted).not.toContain(running);
    expect(report.kept.find((c) => c.checkpoint_id === scheduled)).toMatchObject({
      reasons: ['referenced'],
      referenced_by: [`schedule ${schedule.scheduleId}`],
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
  } finally {
    await close();
    await schedule.delete();
    await idle.terminate('test over');
  }
}, 240_000);

test('a workflow scan truncated by its bound deletes nothing and says so in retention.json; schedules are still read', async () => {
  const { input, taskQueue, campaignDir, applied } = await fourRoundCampaign();
  const dir = await copyOfCampaign(campaignDir);
  const scheduled = applied.expendable[0]!.checkpoint_id;
  const schedule = await scheduleStartingFrom(input, taskQueue, scheduled);
  // Three open workflows (the witness among them), one more than the bound; one per page.
  const open = [await openWorkflow(input, 'witness'), await openWorkflow(input, 'other'), await openWorkflow(input, 'another')];
  const { provider, deleted, close } = deletingProvider();
  try {
    const report = await applyRetention({
      campaignDir: dir,
      rule: RULE,
      client: env.temporal.client,
      witness: witnessOf(open[0]!),
      scan: { maxWorkflows: 2, pageSize: 1 },
      own: [],
      provider,
    });
    expect(deleted).toEqual([]);
    const written = await readArtifact<RetentionReport>(joinLocation(dir, 'retention.json'));
    expect(written.held).toBe('nothing deleted: the workflow scan was truncated at 2 open workflows');
    expect(written.scan.workflows).toBe(2);
    expect(written.expendable.length).toBeGreaterThan(0);
    expect(written.expendable.every((c) => !c.deleted)).toBe(true);
    // The schedule was read though the workflows' bound was hit.
    expect(written.scan.schedules).toBeGreaterThanOrEqual(1);
    expect(written.kept.find((c) => c.checkpoint_id === scheduled)).toMatchObject({
      reasons: ['referenced'],
      referenced_by: [`schedule ${schedule.scheduleId}`],
    });
    expect(report).toEqual(written);
  } finally {
    await close();
    await schedule.delete();
    for (const h of open) await h.terminate('test over');
  }
}, 240_000);

test('a reference scan that fails (a namespace the server does not know) deletes nothing and records why', async () => {
  const { input, campaignDir } = await fourRoundCampaign();
  const dir = await copyOfCampaign(campaignDir);
  const witness = await openWorkflow(input, 'witness');
  const elsewhere = new Client({ connection: env.temporal.client.connection, namespace: 'roundhouse-no-such-namespace' });
  const { provider, deleted, close } = deletingProvider();
  try {
    await applyRetention({ campaignDir: dir, rule: RULE, client: elsewhere, witness: witnessOf(witness), own: [], provider });
    expect(deleted).toEqual([]);
    const written = await readArtifact<RetentionReport>(joinLocation(dir, 'retention.json'));
    expect(written.held).toMatch(/^nothing deleted: open workflows could not be listed: .*roundhouse-no-such-namespace/);
    expect(written.held).toMatch(/schedules could not be read: /);
    expect(written.expendable.length).toBeGreaterThan(0);
    expect(written.expendable.every((c) => !c.deleted)).toBe(true);
  } finally {
    await close();
    await witness.terminate('test over');
  }
}, 240_000);

test('a scan that does not list the workflow known to run the pass (visibility behind) deletes nothing and records why', async () => {
  const { input, campaignDir } = await fourRoundCampaign();
  const dir = await copyOfCampaign(campaignDir);
  // The run the pass names as its own is not open in visibility's answer: here, because it has ended.
  const gone = await openWorkflow(input, 'gone');
  await gone.terminate('ended before the pass');
  const { provider, deleted, close } = deletingProvider();
  try {
    await applyRetention({ campaignDir: dir, rule: RULE, client: env.temporal.client, witness: witnessOf(gone), own: [], provider });
    expect(deleted).toEqual([]);
    const written = await readArtifact<RetentionReport>(joinLocation(dir, 'retention.json'));
    expect(written.held).toBe(
      `nothing deleted: visibility is behind: open workflow ${gone.workflowId} (run ${gone.firstExecutionRunId}), which runs this pass, is not listed`,
    );
    expect(written.expendable.every((c) => !c.deleted)).toBe(true);
  } finally {
    await close();
  }
}, 240_000);

test('a checkpoint that an open workflow starts from after the first scan, before its delete, is kept', async () => {
  const { input, campaignDir, applied } = await fourRoundCampaign();
  const dir = await copyOfCampaign(campaignDir);
  expect(applied.expendable.length).toBeGreaterThanOrEqual(2);
  const target = applied.expendable.at(-1)!.checkpoint_id; // the pass deletes in this order: the target comes last
  const witness = await openWorkflow(input, 'witness');
  let late: Awaited<ReturnType<typeof openWorkflow>> | undefined;
  // While the pass deletes its first checkpoint, a campaign starting from the target opens (and becomes visible).
  const { provider, deleted, close } = deletingProvider(async () => {
    late ??= await openWorkflow(input, 'late', [target]);
  });
  try {
    const report = await applyRetention({
      campaignDir: dir,
      rule: RULE,
      client: env.temporal.client,
      witness: witnessOf(witness),
      own: [],
      provider,
    });
    expect(late).toBeDefined();
    expect(deleted.length).toBe(applied.expendable.length - 1);
    expect(deleted).not.toContain(target);
    const written = await readArtifact<RetentionReport>(joinLocation(dir, 'retention.json'));
    expect(written.held).toBeUndefined();
    expect(written.kept.find((c) => c.checkpoint_id === target)).toMatchObject({
      reasons: ['referenced'],
      referenced_by: [`workflow ${late!.workflowId}`],
    });
    expect(written.expendable.map((c) => c.checkpoint_id).sort()).toEqual([...deleted].sort());
    expect(written.expendable.every((c) => c.deleted)).toBe(true);
    expect(report).toEqual(written);
  } finally {
    await close();
    await witness.terminate('test over');
    await late?.terminate('test over');
  }
}, 240_000);

test('on Tinker, whose API deletes checkpoints, the campaign’s own retention pass deletes the expendable ones at the provider and keeps the rest', async () => {
  const { result, applied } = await retentionCampaign('retention-tinker', 3, 'tinker');
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
  expect(applied.provider_deletes).toBe(true);
  expect(applied.held).toBeUndefined(); // the scans listed the campaign, whose activity ran the pass
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

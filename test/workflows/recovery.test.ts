import fs from 'node:fs';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { loadCampaignReportData, renderCampaignHtml } from '../../activities/report';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Provider-side failures (a failed operation, a dead trainer) roll a round back to its latest checkpoint under a new
// lineage of keys; the round still ends with exactly its planned steps, each recorded once, and nothing left active.
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 });

const report = (r: { reportPath: string }) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));

/** 64 ticket rows, batch 8, 3 epochs: 24 steps in segments of 4, a rolling checkpoint every 3 steps. */
function recoveryInput(campaignId: string, maxRecoveries = 12): RoundInput {
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId, trainRows: 64, evalRows: 6 });
  input.spec.training = { ...input.spec.training, epochs: 3, segmentSteps: 4, checkpointEvery: { steps: 3, keep: 3 } };
  input.spec.advanced = { ...input.spec.advanced, maxRecoveries };
  return input;
}

afterEach(async () => {
  await setFaults(env.emulator, {});
});

test('failed forward-backwards (mixed codes) and a trainer death mid-training: rolled back to checkpoints, exact steps, each recorded once, nothing active', async () => {
  const taskQueue = uniqueTaskQueue('recovery');
  await setFaults(env.emulator, {
    seed: 11,
    rules: [
      { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INTERNAL_ERROR', rate: 0.05, max: 2 },
      { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'TIMEOUT', rate: 0.05, max: 1 },
      { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'RESOURCE_EXHAUSTED', rate: 0.05, max: 1 },
      { kind: 'resource-error', operation: 'optim-step', after: 14, max: 1 },
    ],
  });
  const result: RoundResult = await runRound(recoveryInput(`recover-${taskQueue}`), taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 24, totalSteps: 24 });

  const r = report(result);
  process.stderr.write(
    `[recovery] ${r.recoveries.length} recoveries: ${r.recoveries.map((x: { error_type: string; code: string; phase: string; failed_at_step: number; rolled_back_to: number; new_trainer: boolean }) => `${x.error_type}/${x.code} ${x.phase}@${x.failed_at_step}→${x.rolled_back_to}${x.new_trainer ? ' new trainer' : ''}`).join(', ')}\n`,
  );
  expect(r.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 24 }, (_v, i) => i + 1));
  expect(result.recoveries).toHaveLength(r.recoveries.length);
  const types = new Set(r.recoveries.map((x: { error_type: string }) => x.error_type));
  expect(types).toContain('OperationFailed');
  // The trainer's death is seen as whichever failure the round awaits first (its session's operations fail, or a
  // failed step ahead of them); either way the dead trainer is replaced, once.
  expect(r.recoveries.filter((x: { new_trainer: boolean }) => x.new_trainer)).toHaveLength(1);
  // A rollback never goes back further than the checkpoint cadence (3 steps) plus the segment it interrupted.
  for (const x of r.recoveries) expect(x.steps_rolled_back).toBeLessThanOrEqual(4);
  expect(r.rolling_checkpoints.length).toBeGreaterThan(0);

  // The campaign report shows each recovery.
  const campaignDir = path.dirname(result.reportPath);
  fs.writeFileSync(
    path.join(campaignDir, 'campaign.json'),
    JSON.stringify({ campaignId: 'c', status: 'completed', gpuMinutes: 0, rounds: [{ round: 1, reportPath: result.reportPath }] }),
  );
  const html = renderCampaignHtml(
    await loadCampaignReportData(campaignDir, { temporalUiUrl: 'http://127.0.0.1:8233', namespace: 'default' }),
  );
  const table = html.slice(html.indexOf('<h2>Recoveries from provider failures</h2>'), html.indexOf('<h2>Per-example flips'));
  expect(table.match(/<tr><td>1<\/td>/g)).toHaveLength(r.recoveries.length);

  const l = await ledger(env.emulator);
  expect(l.active).toEqual([]);
  // The dead trainer and its replacement: both released, one holding GPUs at a time.
  expect(r.deactivated_ids.length).toBe(2);
  const final = l.sessions.find((s) => s.id === r.session_id)!;
  expect(final).toBeDefined();
});

test('a trainer lost while sampling after training: re-provisioned from the training checkpoint, the phase redone', async () => {
  const taskQueue = uniqueTaskQueue('recovery-sample');
  await setFaults(env.emulator, { seed: 3, rules: [{ kind: 'resource-error', operation: 'sample', max: 1 }] });
  const result: RoundResult = await runRound(recoveryInput(`recover-sample-${taskQueue}`), taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 24 });
  expect(result.accuracy).toBeDefined();
  const r = report(result);
  expect(r.recoveries).toEqual([
    expect.objectContaining({
      phase: 'evaluation',
      error_type: 'TrainerLost',
      new_trainer: true,
      rolled_back_to: 24,
      steps_rolled_back: 0,
    }),
  ]);
  expect(r.recoveries[0].checkpoint_id).toBe(r.training_checkpoint_id);
  expect(r.steps).toHaveLength(24);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('past advanced.maxRecoveries the round fails cleanly with the failure type and releases everything', async () => {
  const taskQueue = uniqueTaskQueue('recovery-bound');
  await setFaults(env.emulator, {
    seed: 5,
    rules: [{ kind: 'fail-operation', operation: 'optim-step', errorCode: 'INTERNAL_ERROR', after: 2, rate: 1, max: 50 }],
  });
  const input = recoveryInput(`recover-bound-${taskQueue}`, 2);
  const err = await runRound(input, taskQueue).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  expect((err as WorkflowFailedError).cause).toMatchObject({ type: 'OperationFailed' });
  const r = JSON.parse(fs.readFileSync(`${input.reportDir}/round-1.json`, 'utf8'));
  expect(r).toMatchObject({ status: 'failed', error_type: 'OperationFailed', cleanup_status: 'deactivated' });
  expect(r.recoveries).toHaveLength(2);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

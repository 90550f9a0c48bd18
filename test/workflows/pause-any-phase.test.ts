import path from 'node:path';
import { campaignWorkflow } from '../../workflows';
import {
  campaignProgressQuery,
  pauseCampaignUpdate,
  resumeCampaignUpdate,
  type CampaignInput,
  type CampaignResult,
} from '../../workflows/campaign/contract';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, setFaults } from '../helpers/emulator';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// A pause gives the GPU back in whatever phase it arrives, not only at the top of the training loop: here while the
// trainer waits in the capacity queue, and while the trained model is being sampled and scored.
const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 });

afterEach(async () => {
  await setFaults(env.emulator, {});
});

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return Date.now() - started;
}

async function pauseDuring(
  label: string,
  faults: unknown,
  phase: (p: { phase: string; waiting?: unknown }) => boolean,
): Promise<{ result: CampaignResult; releasedMs: number }> {
  const taskQueue = uniqueTaskQueue(label);
  await setFaults(env.emulator, faults);
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 24,
    evalRows: 4,
    yaml: 'rounds: { max: 1, nextData: { policy: static } }',
  });
  const campaignId = `${label}-${taskQueue}`;
  return withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: path.join(dir, 'campaigns') } satisfies CampaignInput],
    });
    const current = async () => (await handle.query(campaignProgressQuery)).currentRound;
    let held: string[] = [];
    await until(`the round to reach ${label}`, async () => {
      const c = await current();
      held = (await ledger(env.emulator)).active;
      return c !== undefined && phase(c) && held.length > 0;
    });
    await handle.executeUpdate(pauseCampaignUpdate);
    const releasedMs = await until('the GPU to be given back', async () => {
      const active = (await ledger(env.emulator)).active;
      return held.every((id) => !active.includes(id)) && (await current())?.phase === 'paused';
    });
    process.stderr.write(`[pause] ${label}: ${held.join(', ')} released ${releasedMs} ms after the pause\n`);
    await setFaults(env.emulator, {});
    await handle.executeUpdate(resumeCampaignUpdate);
    return { result: await handle.result(), releasedMs };
  });
}

test('a pause while the trainer waits in the capacity queue gives it back at once; resumed, the round provisions again and completes', async () => {
  const { result, releasedMs } = await pauseDuring(
    'pause-provisioning',
    { rules: [{ kind: 'capacity-queue', max: 1, durationMs: 120_000, queuePosition: 4 }] },
    (c) => c.phase === 'provisioning' && c.waiting !== undefined,
  );
  expect(releasedMs).toBeLessThan(15_000);
  expect(result.status).toBe('completed');
  expect(result.rounds[0]).toMatchObject({ status: 'completed', stepsApplied: 6 });
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('a pause while the trained model is sampled gives the GPU back; resumed, sampling runs again on a trainer loaded from the training checkpoint', async () => {
  const { result, releasedMs } = await pauseDuring(
    'pause-sampling',
    // Every sampling request waits 3 s: the phase lasts long enough to pause in.
    { rules: [{ kind: 'delay', path: 'operations/sample$', delayMs: 3000, max: 1000 }] },
    (c) => c.phase === 'evaluating' || c.phase === 'sampling',
  );
  expect(releasedMs).toBeLessThan(15_000);
  expect(result.status).toBe('completed');
  expect(result.rounds[0]!.accuracy).toBeDefined();
  expect((await ledger(env.emulator)).active).toEqual([]);
});

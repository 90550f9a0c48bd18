import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities } from '../../activities';
import type { SegmentInput } from '../../workflows/round/contract';
import { ProviderRegistry } from '../../workers/providers';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { arithmeticRoundInput } from '../helpers/round';

// A round's activities move between worker processes (a retry after a kill lands on the other worker). Tinker names a
// model by its session and a model seq, and takes a create under a seq it already has as that model, so a worker that
// opens a model must not trust the seq it counted when it last opened one there: the other worker may have opened more.

let emulator: RunningEmulator;
const registries: ProviderRegistry[] = [];

function run<A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
  return new MockActivityEnvironment().run<A, R, (...a: A) => Promise<R>>(fn, ...args);
}

/** A worker process: its own providers (its own Tinker client state), the one Tinker account. */
function workerProcess() {
  const providers = new ProviderRegistry({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-reopen-')),
    env: { ...process.env, TINKER_API_KEY: 'tml-reopen-key' },
  });
  registries.push(providers);
  return { providers, activities: createActivities(providers) };
}

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  for (const r of registries) await r.close();
  await emulator.close();
});

test('a worker reopening a Tinker model after the other worker opened one there gets a fresh model, and trains it step by step', async () => {
  const campaignId = 'tinker-reopen';
  const input = arithmeticRoundInput({
    baseUrl: emulator.url,
    campaignId,
    limit: 8,
    yaml: 'training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 3 }\nsampling: { maxTokens: 3 }',
  });
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: emulator.url };
  const [a, b] = [workerProcess(), workerProcess()];
  const plan = await run(a.activities.prepareRound, { spec: input.spec, data: input.data });
  const data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
  const tinker = await a.providers.providerFor(input.spec.provider);
  const trainer = await tinker.provision({ model: input.spec.provider.model, ownerTag: campaignId });
  const open = (w: typeof a) => run(w.activities.openTrainingSession, { spec: input.spec, resourceId: trainer.id, ownerTag: campaignId });
  const segment = (session: { sessionId: string; stepOffset: number }, lineage: number): SegmentInput => ({
    campaignId,
    round: 1,
    spec: input.spec,
    data,
    sessionId: session.sessionId,
    stepOffset: session.stepOffset,
    cursor: { step: 0 },
    totalSteps: plan.totalSteps,
    stepsDir: path.join(input.reportDir, 'steps'),
    lineage,
  });

  // Worker A opens the round's first model (lineage 0); after a recovery, worker B opens lineage 1 and measures its
  // baseline (forward passes) and trains three steps before it is killed.
  await open(a);
  const killed = await open(b);
  await run(b.activities.measureLoss, {
    campaignId,
    round: 1,
    label: 'baseline',
    lineage: 1,
    spec: input.spec,
    data,
    sessionId: killed.sessionId,
    which: 'eval',
  });
  expect((await run(b.activities.trainSegment, segment(killed, 1))).cursor.step).toBe(3);

  // The retry lands on A, which rolls back: a fresh model (lineage 2), trained from step 0.
  // (It used to be B's model under the seq A counted last: every operation A sent was deduplicated into B's, and the
  // segment failed StepCounterMismatch, "optim_step for round step 2 reported provider step 1", as in the soak.)
  const reopened = await open(a);
  const result = await run(a.activities.trainSegment, segment(reopened, 2));
  expect(result.cursor.step).toBe(3);
  expect(reopened.sessionId).not.toBe(killed.sessionId);
  const l = await ledger(emulator);
  const model = (id: string) => l.sessions.find((s) => s.id === id)!;
  expect(model(reopened.sessionId)).toMatchObject({ step: 3, optimizerSteps: 3, duplicatesAbsorbed: 0 });
  expect(model(killed.sessionId)).toMatchObject({ step: 3, optimizerSteps: 3 });
});

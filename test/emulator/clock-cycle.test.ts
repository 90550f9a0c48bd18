import { ownerOf } from '../../emulator/engine';
import type { OperationHandle } from '../../providers/types';
import { startTestEmulator, testApiKey, togetherProvider, type RunningEmulator } from '../helpers/emulator';

const CYCLE_MS = 400;
const ADAM = { learningRate: 0.001, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClipNorm: 1 };
const DATUM = { modelInput: [10, 11, 12, 13], targetTokens: [11, 12, 13, 14], weights: [0, 0, 1, 1] };

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator({ clockCycleMs: CYCLE_MS });
});

afterAll(async () => {
  await emulator.close();
});

/**
 * Clock-cycle mode models hosted trainers that batch work in cycles: every operation queued by a tick runs in
 * that tick. The overhead benchmark's "< 0.6 × the naive loop" figure rests on it.
 */
test('in clock-cycle mode operations submitted back to back run in one tick; awaiting one before submitting the next costs a tick more', async () => {
  const apiKey = testApiKey();
  const provider = togetherProvider(emulator, apiKey);
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'clock-cycle' });
  await provider.waitReady(resource.id, { pollIntervalMs: 20 });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 4, seed: 1 });
  const completedAt = (h: OperationHandle<unknown>) =>
    emulator.engine.getOperation(session.id, ownerOf(apiKey), h.operationId).completedAt!;
  try {
    // Back to back: optim_step runs right after forward_backward, in the same tick.
    const fb1 = await provider.submitForwardBackward(session.id, 'pipelined/fb', [DATUM]);
    const opt1 = await provider.submitOptimStep(session.id, 'pipelined/opt', ADAM);
    await provider.awaitOperation(opt1);
    // No tick waited between them: the gap is optim_step's own compute (a loaded CI machine took 147 ms).
    expect(completedAt(opt1) - completedAt(fb1)).toBeLessThan((CYCLE_MS * 3) / 4);

    // Awaited first: optim_step is submitted after the tick that ran forward_backward, so it waits for the next.
    const fb2 = await provider.submitForwardBackward(session.id, 'naive/fb', [DATUM]);
    await provider.awaitOperation(fb2);
    const opt2 = await provider.submitOptimStep(session.id, 'naive/opt', ADAM);
    await provider.awaitOperation(opt2);
    // A later tick, wherever in it each ran (a gap in milliseconds is a timing, and timings belong to bench/: under
    // load a forward-backward late in its tick and the next tick's optim_step were 91 ms apart).
    expect(Math.floor(completedAt(opt2) / CYCLE_MS)).toBeGreaterThan(Math.floor(completedAt(fb2) / CYCLE_MS));
  } finally {
    await provider.deactivate(resource.id);
    await provider.close();
  }
});

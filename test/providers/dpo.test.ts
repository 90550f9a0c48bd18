import { dpoLossAndGradients } from '../../activities/dpo-loss';
import type { Datum } from '../../providers/types';
import { basetenProvider, startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

let emulator: RunningEmulator;
beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await emulator.close();
});

const answerDatum = (prompt: number[], answer: number[]): Datum => {
  const full = [...prompt, ...answer];
  return {
    modelInput: full.slice(0, -1),
    targetTokens: full.slice(1),
    weights: full.slice(1).map((_t, i) => (i + 1 >= prompt.length ? 1 : 0)),
  };
};

test('DPO through custom_forward_backward (Together): steps on the caller-computed gradients widen the preference margin', async () => {
  const provider = togetherProvider(emulator);
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'dpo' });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8 });
  const chosen = answerDatum([21, 22, 23], [41, 42]);
  const rejected = answerDatum([21, 22, 23], [51, 52]);
  const forward = async (tag: string) =>
    (
      await provider.awaitOperation(
        await provider.submitForwardBackward(session.id, tag, [chosen, rejected], { forwardOnly: true, returnLogprobs: true }),
      )
    ).logprobs!;
  const [refChosen, refRejected] = await forward('ref');
  const sum = (lp: number[], d: Datum) => lp.reduce((a, v, i) => a + v * d.weights[i]!, 0);
  const reference = { chosen: sum(refChosen!, chosen), rejected: sum(refRejected!, rejected) };
  const margins: number[] = [];
  for (let step = 1; step <= 5; step++) {
    const [c, r] = await forward(`policy/${step}`);
    const dpo = dpoLossAndGradients(
      {
        chosen: { logprobs: c!, weights: chosen.weights, referenceLogprob: reference.chosen },
        rejected: { logprobs: r!, weights: rejected.weights, referenceLogprob: reference.rejected },
      },
      0.5,
    );
    margins.push(dpo.margin);
    await provider.awaitOperation(
      await provider.submitCustomForwardBackward(session.id, `dpo/${step}`, [chosen, rejected], [dpo.chosen, dpo.rejected]),
    );
    expect(await provider.awaitOperation(await provider.submitOptimStep(session.id, `opt/${step}`, { learningRate: 0.01 }))).toEqual({
      step,
    });
  }
  expect(margins[0]).toBeCloseTo(0, 6); // the policy starts as its own reference
  expect(margins[4]!).toBeGreaterThan(1); // and learns to prefer the chosen answer
  await provider.deactivate(resource.id);
  await provider.close();
});

test('Baseten refuses a custom loss as unsupported (non-retryable)', async () => {
  const provider = basetenProvider(emulator);
  await expect(provider.submitCustomForwardBackward()).rejects.toMatchObject({ code: 'UNSUPPORTED', errorClass: 'non-retryable' });
  await provider.close();
});

import type { Datum } from '../../providers/types';
import { ledger, startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

/** A labelled set: a prompt of "ticket words" → a label of one or two tokens. */
const LABELS: Record<string, number[]> = { billing: [900, 901], outage: [910], login: [920, 921] };
const WORDS: Record<string, number[]> = { billing: [101, 102, 103, 104], outage: [201, 202, 203, 204], login: [301, 302, 303, 304] };
const NOISE = [500, 501, 502, 503, 504, 505];

function rows(count: number, offset: number): { prompt: number[]; label: number[] }[] {
  const names = Object.keys(LABELS);
  return Array.from({ length: count }, (_v, i) => {
    const name = names[i % names.length]!;
    const words = WORDS[name]!;
    const prompt = [1, words[(i + offset) % 4]!, NOISE[(i * 7 + offset) % NOISE.length]!, words[(i + offset + 1) % 4]!, 2];
    return { prompt, label: LABELS[name]! };
  });
}

function datum(prompt: number[], answer: number[]): Datum {
  const full = [...prompt, ...answer];
  return {
    modelInput: full.slice(0, -1),
    targetTokens: full.slice(1),
    weights: full.slice(1).map((_t, i) => (i + 1 >= prompt.length ? 1 : 0)),
  };
}

let emulator: RunningEmulator;
beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await emulator.close();
});

test('training on a labelled set drives eval loss down and greedy samples to the trained labels', async () => {
  const provider = togetherProvider(emulator);
  const resource = await provider.provision({ model: 'Qwen/Qwen3-8B', ownerTag: 'learns' });
  await provider.waitReady(resource.id);
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 1 });
  const train = rows(12, 0).map((r) => datum(r.prompt, r.label));
  const evalRows = rows(6, 2);
  const evalSet = evalRows.map((r) => datum(r.prompt, r.label));

  const evalLoss = async (tag: string) =>
    (await provider.awaitOperation(await provider.submitForwardBackward(session.id, `eval/${tag}`, evalSet, { forwardOnly: true }))).loss;
  const greedyLabels = async (tag: string) => {
    await provider.awaitOperation(await provider.submitSamplerWeights(session.id, `sampler/${tag}`));
    const results = await provider.awaitOperation(
      await provider.submitSample(
        session.id,
        `sample/${tag}`,
        evalRows.map((r) => r.prompt),
        { maxTokens: 2, temperature: 0 },
      ),
    );
    return results.map((r, i) => r.sequences[0]!.tokens.slice(0, evalRows[i]!.label.length));
  };

  const before = await evalLoss('before');
  const labelsBefore = await greedyLabels('before');
  for (let step = 1; step <= 30; step++) {
    const fb = await provider.submitForwardBackward(session.id, `fb/${step}`, train);
    const opt = await provider.submitOptimStep(session.id, `opt/${step}`, { learningRate: 0.02 });
    await provider.awaitOperation(fb);
    await provider.awaitOperation(opt);
  }
  const after = await evalLoss('after');
  const labelsAfter = await greedyLabels('after');

  expect(after).toBeLessThan(before / 5);
  const correct = (labels: number[][]) => labels.filter((l, i) => JSON.stringify(l) === JSON.stringify(evalRows[i]!.label)).length;
  expect(correct(labelsBefore)).toBe(0);
  expect(correct(labelsAfter)).toBe(evalRows.length);
  expect((await ledger(emulator)).sessions.find((s) => s.id === session.id)!.optimizerSteps).toBe(30);
  await provider.deactivate(resource.id);
  await provider.close();
});

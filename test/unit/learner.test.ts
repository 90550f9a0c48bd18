import * as tf from '@tensorflow/tfjs-core';
import {
  Learner,
  LearnerInputError,
  crossEntropyLoss,
  linearLogprobLoss,
  type AdamSettings,
  type LearnerOptions,
  type LearnerState,
  type TokenSequence,
} from '../../emulator/learner';
import { seededRandom } from '../../emulator/random';

const QWEN_VOCAB = 151_936;

function adam(overrides: Partial<AdamSettings> = {}): AdamSettings {
  return { learningRate: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, gradClipNorm: 1, ...overrides };
}

interface Example {
  prompt: number[];
  answer: number[];
}

/** Prompt → answer pairs as training sequences, with loss weight on the answer tokens only. */
function supervised(examples: Example[]): { batch: TokenSequence[]; weights: number[][] } {
  const batch = examples.map(({ prompt, answer }) => {
    const tokens = [...prompt, ...answer];
    return { inputTokens: tokens.slice(0, -1), targetTokens: tokens.slice(1) };
  });
  const weights = examples.map(({ prompt, answer }) => [...prompt.slice(1).map(() => 0), ...answer.map(() => 1)]);
  return { batch, weights };
}

function randomTokens(random: () => number, length: number, vocabSize = QWEN_VOCAB): number[] {
  return Array.from({ length }, () => Math.floor(random() * vocabSize));
}

/** Six prompts with distinct 2–3 token answers. */
function memorisationSet(seed: number): Example[] {
  const random = seededRandom(seed);
  return Array.from({ length: 6 }, (_, i) => ({ prompt: randomTokens(random, 5 + (i % 3)), answer: randomTokens(random, 2 + (i % 2)) }));
}

function train(learner: Learner, examples: Example[], steps: number, settings = adam()): number[] {
  const { batch, weights } = supervised(examples);
  const losses: number[] = [];
  for (let step = 0; step < steps; step++) {
    losses.push(learner.forwardBackward(batch, crossEntropyLoss(weights)).loss);
    learner.optimStep(settings);
  }
  return losses;
}

function greedy(learner: Learner, prompt: number[], maxTokens: number): number[] {
  return learner.sample(prompt, { maxTokens, temperature: 0 }, 1)[0].tokens;
}

/** The adapter's exported weights as one vector (the state stores base64 Float32). */
function adapterWeights(state: LearnerState): number[] {
  return Object.values(state.adapter).flatMap((b64) => {
    const bytes = Buffer.from(b64!, 'base64');
    return Array.from(new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
  });
}

const norm = (values: number[]) => Math.sqrt(values.reduce((sum, v) => sum + v * v, 0));
const maxAbsDifference = (a: number[], b: number[]) => Math.max(...a.map((v, i) => Math.abs(v - b[i])));

const created: Learner[] = [];
async function newLearner(options: Partial<LearnerOptions> = {}): Promise<Learner> {
  const learner = await Learner.create({ vocabSize: QWEN_VOCAB, seed: 11, loraRank: 8, ...options });
  created.push(learner);
  return learner;
}
afterAll(() => created.forEach((learner) => learner.dispose()));

describe('loss and logprobs', () => {
  test('the loss is the weighted sum of token NLLs (a sum, not a mean)', async () => {
    const learner = await newLearner();
    const batch: TokenSequence[] = [
      { inputTokens: [10, 20, 30], targetTokens: [20, 30, 40] },
      { inputTokens: [7, 8], targetTokens: [8, 151_935] },
    ];
    const weights = [
      [1, 0, 2],
      [0.5, 1],
    ];
    const { loss, logprobs } = learner.forward(batch, crossEntropyLoss(weights));
    const expected = -weights.flatMap((row, s) => row.map((w, i) => w * logprobs[s][i])).reduce((a, b) => a + b);
    expect(loss).toBeCloseTo(expected, 3);
    expect(logprobs.map((row) => row.length)).toEqual([3, 2]);
    expect(learner.forward(batch, crossEntropyLoss(weights.map((row) => row.map((w) => 2 * w)))).loss).toBeCloseTo(2 * loss, 3);
    expect(learner.forward(batch, crossEntropyLoss(weights.map((row) => row.map(() => 0)))).loss).toBe(0);
    // An untrained model over ~152K ids: about log V nats per token.
    expect(-logprobs[0][0]).toBeGreaterThan(Math.log(QWEN_VOCAB) - 3);
  });

  test('with every id of a small vocabulary seen, the next-token probabilities sum to 1', async () => {
    const learner = await newLearner({ vocabSize: 50 });
    learner.promptLogprobs(Array.from({ length: 50 }, (_, id) => id));
    const context = [3, 14, 15, 9, 26];
    const total = Array.from({ length: 50 }, (_, id) => Math.exp(learner.promptLogprobs([...context, id])[context.length])).reduce(
      (a, b) => a + b,
    );
    expect(total).toBeCloseTo(1, 4);
    expect(learner.nextTokenDistribution(context).unseenCount).toBe(0);
  });

  test('over a 152K vocabulary, seen tokens plus every unseen id make one proper distribution', async () => {
    const learner = await newLearner();
    train(learner, memorisationSet(1), 5); // seen tokens now carry real mass
    const context = [101, 2002, 30_003];
    const dist = learner.nextTokenDistribution(context);
    const seenMass = dist.seen.reduce((sum, s) => sum + Math.exp(s.logprob), 0);
    expect(dist.unseenCount).toBe(QWEN_VOCAB - dist.seen.length);
    expect(seenMass + dist.unseenMass).toBeCloseTo(1, 4);
    // The same numbers come back through promptLogprobs for a seen token…
    const seenToken = dist.seen[dist.seen.length - 1];
    expect(learner.promptLogprobs([...context, seenToken.tokenId])[3]).toBeCloseTo(seenToken.logprob, 4);
    // …and through sampling for an unseen one (the unseen ids hold most of the mass of a fresh context)…
    const [drawn] = learner.sample(context, { maxTokens: 1, temperature: 1, seed: 5 }, 1);
    const token = drawn.tokens[0];
    expect(dist.seen.some((s) => s.tokenId === token)).toBe(false);
    expect(drawn.logprobs[0]).toBeCloseTo(dist.logprobOf(token), 4);
    // …and scoring it, which adds it to the seen tokens, gives it the same probability and changes no other.
    expect(learner.promptLogprobs([...context, token])[3]).toBeCloseTo(drawn.logprobs[0], 4);
    expect(learner.promptLogprobs([...context, seenToken.tokenId])[3]).toBeCloseTo(seenToken.logprob, 4);
  });
});

describe('learning', () => {
  test('memorises six prompt → answer pairs: greedy samples become the answers and the loss falls >50×', async () => {
    const learner = await newLearner();
    const examples = memorisationSet(2);
    expect(examples.filter((e) => greedy(learner, e.prompt, e.answer.length).join() === e.answer.join())).toHaveLength(0);
    const losses = train(learner, examples, 30);
    for (const { prompt, answer } of examples) expect(greedy(learner, prompt, answer.length)).toEqual(answer);
    expect(losses[0] / losses[losses.length - 1]).toBeGreaterThan(50);
    expect(learner.step).toBe(30);
  });

  test('generalises on keyword classification: held-out accuracy and eval loss improve far beyond chance', async () => {
    const random = seededRandom(3);
    const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)];
    const labels = [1001, 1002, 1003, 1004];
    const keywords = labels.map((_, c) => Array.from({ length: 6 }, (_, k) => 20_000 + 100 * c + k));
    const noise = Array.from({ length: 300 }, (_, k) => 50_000 + 7 * k);
    const separator = 5;
    // A prompt: three keywords of its class among five noise tokens, shuffled; held-out prompts are new mixtures.
    const ticket = (): Example => {
      const c = Math.floor(random() * labels.length);
      const words = [...[0, 1, 2].map(() => pick(keywords[c])), ...[0, 1, 2, 3, 4].map(() => pick(noise))];
      for (let i = words.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [words[i], words[j]] = [words[j], words[i]];
      }
      return { prompt: [...words, separator], answer: [labels[c]] };
    };
    const trainSet = Array.from({ length: 128 }, ticket);
    const heldOut = Array.from({ length: 64 }, ticket);
    const learner = await newLearner({ seed: 3 });
    const evalSet = supervised(heldOut);
    const evalLoss = () => learner.forward(evalSet.batch, crossEntropyLoss(evalSet.weights)).loss;
    const accuracy = () => heldOut.filter((e) => greedy(learner, e.prompt, 1)[0] === e.answer[0]).length / heldOut.length;

    const [lossBefore, accuracyBefore] = [evalLoss(), accuracy()];
    for (let step = 0; step < 40; step++)
      train(
        learner,
        [0, 1, 2, 3, 4, 5, 6, 7].map((i) => trainSet[(step * 8 + i) % trainSet.length]),
        1,
      );
    const [lossAfter, accuracyAfter] = [evalLoss(), accuracy()];

    expect(accuracyAfter).toBeGreaterThanOrEqual(0.6); // chance is 0.25
    expect(accuracyAfter).toBeGreaterThan(accuracyBefore + 0.3);
    expect(lossAfter).toBeLessThan(lossBefore / 3);
  });
});

describe('optimizer', () => {
  const examples = memorisationSet(4);
  const { batch, weights } = supervised(examples);

  test('two half-batch forwardBackward calls then optimStep equal one whole-batch call (tokens already seen)', async () => {
    const [split, whole] = [await newLearner(), await newLearner()];
    for (const learner of [split, whole]) learner.forward(batch, crossEntropyLoss(weights)); // e.g. a baseline eval
    split.forwardBackward(batch.slice(0, 3), crossEntropyLoss(weights.slice(0, 3)));
    split.forwardBackward(batch.slice(3), crossEntropyLoss(weights.slice(3)));
    whole.forwardBackward(batch, crossEntropyLoss(weights));
    const [a, b] = [split.optimStep(adam()), whole.optimStep(adam())];
    expect(a.gradNorm).toBeCloseTo(b.gradNorm, 3);
    expect(
      maxAbsDifference(
        adapterWeights(split.exportState({ withOptimizer: false })),
        adapterWeights(whole.exportState({ withOptimizer: false })),
      ),
    ).toBeLessThan(1e-5);
  });

  test('lr 0 leaves predictions unchanged, weight decay shrinks the adapter, and every Adam field changes the trajectory', async () => {
    const run = async (settings: AdamSettings, steps = 3) => {
      const learner = await newLearner();
      const gradNorms: number[] = [];
      for (let i = 0; i < steps; i++) {
        learner.forwardBackward(batch, crossEntropyLoss(weights));
        gradNorms.push(learner.optimStep(settings).gradNorm);
      }
      return {
        logprobs: learner.forward(batch, crossEntropyLoss(weights)).logprobs.flat(),
        weights: adapterWeights(learner.exportState({ withOptimizer: false })),
        gradNorms,
      };
    };
    const untrained = await run(adam(), 0);
    const baseline = await run(adam());
    expect((await run(adam({ learningRate: 0, weightDecay: 0.5 }))).logprobs).toEqual(untrained.logprobs);

    const decayed = await run(adam({ weightDecay: 5 }));
    expect(norm(decayed.weights)).toBeLessThan(norm(baseline.weights));

    const clipped = await run(adam({ gradClipNorm: 1e-3, eps: 1e-2 }));
    expect(clipped.gradNorms[0]).toBeCloseTo(baseline.gradNorms[0], 3); // reported before clipping
    expect(maxAbsDifference(clipped.logprobs, untrained.logprobs)).toBeLessThan(
      maxAbsDifference(baseline.logprobs, untrained.logprobs) / 10,
    );

    for (const variant of [{ learningRate: 2e-2 }, { beta1: 0.5 }, { beta2: 0.9 }, { eps: 1 }, { gradClipNorm: 0 }]) {
      expect(maxAbsDifference((await run(adam(variant))).logprobs, baseline.logprobs)).toBeGreaterThan(1e-4);
    }
  });

  test('optimStep with nothing accumulated still counts a step', async () => {
    const learner = await newLearner();
    expect(learner.optimStep(adam())).toEqual({ step: 1, gradNorm: 0, empty: true });
    expect(learner.step).toBe(1);
  });
});

describe('determinism', () => {
  const script = async (learner: Learner) => {
    const examples = memorisationSet(5);
    const losses = train(learner, examples, 3);
    return {
      losses,
      logprobs: learner.promptLogprobs([...examples[0].prompt, ...examples[0].answer]),
      seeded: learner.sample(examples[1].prompt, { maxTokens: 5, temperature: 1, topP: 0.9, seed: 42 }, 2),
      unseeded: learner.sample(examples[2].prompt, { maxTokens: 8, temperature: 1.5 }, 2),
    };
  };

  test('the same seed and calls give bit-identical losses, logprobs and samples; another seed does not', async () => {
    const first = await script(await newLearner({ seed: 21 }));
    const second = await script(await newLearner({ seed: 21 }));
    expect(second).toEqual(first);
    const other = await script(await newLearner({ seed: 22 }));
    expect(other.losses).not.toEqual(first.losses);
    expect(other.seeded).not.toEqual(first.seeded);
  });

  test('a sample does not depend on how many were asked for alongside it', async () => {
    const learner = await newLearner();
    const params = { maxTokens: 6, temperature: 1, seed: 9 };
    expect(learner.sample([1, 2, 3], params, 4).slice(0, 2)).toEqual(learner.sample([1, 2, 3], params, 2));
  });
});

describe('export and import', () => {
  test('restoring with the optimizer continues exactly as the original would', async () => {
    const original = await newLearner();
    const examples = memorisationSet(6);
    train(original, examples, 3);
    const state = JSON.parse(JSON.stringify(original.exportState({ withOptimizer: true }))) as LearnerState;
    const restored = await Learner.fromState({ vocabSize: QWEN_VOCAB, seed: 11, loraRank: 8 }, state, { optimizer: true });
    created.push(restored);
    expect(restored.step).toBe(3);
    train(original, examples, 1);
    train(restored, examples, 1);
    expect(restored.step).toBe(4);
    expect(restored.exportState({ withOptimizer: true })).toEqual(original.exportState({ withOptimizer: true }));
  });

  test('restoring without the optimizer starts at step 0 with the same predictions', async () => {
    const original = await newLearner();
    const examples = memorisationSet(7);
    train(original, examples, 20);
    const options = { vocabSize: QWEN_VOCAB, seed: 11, loraRank: 8 };
    const restored = await Learner.fromState(options, original.exportState({ withOptimizer: false }), { optimizer: false });
    created.push(restored);
    expect(restored.step).toBe(0);
    const tokens = [...examples[0].prompt, ...examples[0].answer];
    expect(restored.promptLogprobs(tokens)).toEqual(original.promptLogprobs(tokens));
    expect(greedy(restored, examples[1].prompt, 3)).toEqual(greedy(original, examples[1].prompt, 3));
    await expect(Learner.fromState(options, original.exportState({ withOptimizer: false }), { optimizer: true })).rejects.toThrow(
      LearnerInputError,
    );
    await expect(
      Learner.fromState({ ...options, loraRank: 4 }, original.exportState({ withOptimizer: false }), { optimizer: false }),
    ).rejects.toThrow(/loraRank/);
  });
});

describe('input validation', () => {
  test('ids up to vocabSize − 1 are accepted and anything else is rejected with INVALID_INPUT', async () => {
    const learner = await newLearner();
    const ones = (n: number) => crossEntropyLoss([Array(n).fill(1)]);
    expect(learner.forward([{ inputTokens: [0, 151_935], targetTokens: [151_935, 0] }], ones(2)).logprobs[0]).toHaveLength(2);
    const rejected = (batch: TokenSequence[], n = 1) => {
      try {
        learner.forward(batch, ones(n));
      } catch (err) {
        return err;
      }
      return undefined;
    };
    for (const bad of [151_936, -1, 2.5, Number.NaN]) {
      const err = rejected([{ inputTokens: [1], targetTokens: [bad] }]);
      expect(err).toBeInstanceOf(LearnerInputError);
      expect(err).toMatchObject({ code: 'INVALID_INPUT' });
    }
    expect(rejected([{ inputTokens: [], targetTokens: [] }], 0)).toBeInstanceOf(LearnerInputError);
    expect(rejected([{ inputTokens: [1, 2], targetTokens: [2] }])).toBeInstanceOf(LearnerInputError);
    expect(rejected([])).toBeInstanceOf(LearnerInputError);
    expect(() => learner.forward([{ inputTokens: [1, 2], targetTokens: [2, 3] }], ones(1))).toThrow(LearnerInputError);
    expect(() => crossEntropyLoss([[1, Number.NaN]])).toThrow(LearnerInputError);
    expect(() => linearLogprobLoss([[Number.POSITIVE_INFINITY]])).toThrow(LearnerInputError);
    expect(() => learner.sample([151_936], { maxTokens: 1, temperature: 0 }, 1)).toThrow(LearnerInputError);
    expect(() => learner.sample([1], { maxTokens: 1, temperature: -1 }, 1)).toThrow(LearnerInputError);
    await expect(Learner.create({ vocabSize: QWEN_VOCAB, seed: 1, loraRank: 129 })).rejects.toThrow(LearnerInputError);
  });

  test('a non-finite loss fails with NON_FINITE_LOSS and leaves no gradients behind', async () => {
    const learner = await newLearner();
    const nanLoss = (logprobs: tf.Tensor1D) => tf.mul(tf.sum(logprobs), Number.NaN) as tf.Scalar;
    expect(() => learner.forwardBackward([{ inputTokens: [1, 2], targetTokens: [2, 3] }], nanLoss)).toThrow(
      expect.objectContaining({ code: 'NON_FINITE_LOSS' }),
    );
    expect(learner.optimStep(adam()).gradNorm).toBe(0);
  });

  test('linearLogprobLoss backpropagates caller-supplied gradients: g = −1 on a token acts like cross-entropy on it', async () => {
    const [viaGradients, viaCrossEntropy] = [await newLearner(), await newLearner()];
    const batch = [{ inputTokens: [4, 5, 6], targetTokens: [5, 6, 7] }];
    const result = viaGradients.forwardBackward(batch, linearLogprobLoss([[0, -1, -1]]));
    viaCrossEntropy.forwardBackward(batch, crossEntropyLoss([[0, 1, 1]]));
    expect(result.loss).toBeCloseTo(-(result.logprobs[0][1] + result.logprobs[0][2]), 4);
    expect(viaGradients.optimStep(adam())).toEqual(viaCrossEntropy.optimStep(adam()));
  });
});

describe('sampling', () => {
  let learner: Learner;
  const examples = memorisationSet(8);
  beforeAll(async () => {
    learner = await newLearner();
    train(learner, examples, 30);
  });

  test('top_k = 1 equals greedy whatever the temperature and seed', () => {
    // Three prompts: top-k ranks the whole 152K vocabulary at every token, so each draw is costly.
    for (const { prompt } of examples.slice(0, 3)) {
      const expected = greedy(learner, prompt, 5);
      for (const seed of [1, 2])
        expect(learner.sample(prompt, { maxTokens: 5, temperature: 1.3, topK: 1, seed }, 1)[0].tokens).toEqual(expected);
    }
  });

  test('top-k, top-p and a low temperature keep every draw inside the allowed set of the distribution', async () => {
    const small = await newLearner({ vocabSize: 50 });
    small.promptLogprobs(Array.from({ length: 50 }, (_, id) => id)); // all 50 ids seen: a plain 50-way distribution
    const context = [1, 2, 3];
    const ranked = small.nextTokenDistribution(context).seen.sort((a, b) => b.logprob - a.logprob);
    const firstTokens = (params: { topK?: number; topP?: number; temperature?: number }) =>
      new Set(small.sample(context, { maxTokens: 1, temperature: 1, seed: 3, ...params }, 200).map((s) => s.tokens[0]));

    const top3 = new Set(ranked.slice(0, 3).map((s) => s.tokenId));
    expect([...firstTokens({ topK: 3 })].every((t) => top3.has(t))).toBe(true);

    let mass = 0;
    const nucleus = new Set<number>();
    for (const s of ranked) {
      if (mass >= 0.5) break;
      nucleus.add(s.tokenId);
      mass += Math.exp(s.logprob);
    }
    expect([...firstTokens({ topP: 0.5 })].every((t) => nucleus.has(t))).toBe(true);
    expect(firstTokens({}).size).toBeGreaterThan(nucleus.size);
    expect([...firstTokens({ temperature: 0.01 })]).toEqual([ranked[0].tokenId]);
  });

  test('sampled logprobs are the model logprobs that promptLogprobs reports for the same tokens', () => {
    const { prompt } = examples[0];
    const [sampled] = learner.sample(prompt, { maxTokens: 4, temperature: 0.7, seed: 1 }, 1);
    const scored = learner.promptLogprobs([...prompt, ...sampled.tokens]).slice(prompt.length);
    sampled.logprobs.forEach((logprob, i) => expect(logprob).toBeCloseTo(scored[i], 5));
  });

  test('generation ends after a stop sequence or EOS id (kept in tokens) with stopReason "stop", else at maxTokens', () => {
    const { prompt, answer } = examples.find((e) => e.answer.length === 3)!;
    expect(learner.sample(prompt, { maxTokens: 3, temperature: 0, stopTokenSequences: [answer.slice(0, 2)] }, 1)[0]).toMatchObject({
      tokens: answer.slice(0, 2),
      stopReason: 'stop',
    });
    expect(learner.sample(prompt, { maxTokens: 3, temperature: 0, eosTokenIds: [answer[0]] }, 1)[0]).toMatchObject({
      tokens: [answer[0]],
      stopReason: 'stop',
    });
    const free = learner.sample(prompt, { maxTokens: 6, temperature: 0 }, 1)[0];
    expect(free.tokens).toHaveLength(6);
    expect(free.stopReason).toBe('length');
  });
});

describe('resources', () => {
  test('calls leave no tensors behind, a failing call included, and dispose frees the rest', async () => {
    await newLearner(); // the backend is up, so tf.memory() can be read
    const before = tf.memory().numTensors;
    const learner = await Learner.create({ vocabSize: QWEN_VOCAB, seed: 1, loraRank: 4 });
    const examples = memorisationSet(9);
    const exercise = () => {
      train(learner, examples, 2);
      learner.sample(examples[0].prompt, { maxTokens: 4, temperature: 1, topK: 5 }, 2);
      learner.promptLogprobs(examples[1].prompt);
      expect(() => learner.forwardBackward(supervised(examples).batch, crossEntropyLoss([[1]]))).toThrow(LearnerInputError);
    };
    exercise();
    const settled = tf.memory().numTensors;
    exercise();
    expect(tf.memory().numTensors).toBe(settled);
    learner.dispose();
    expect(tf.memory().numTensors).toBe(before);
    expect(() => learner.promptLogprobs([1, 2])).toThrow(/disposed/);
  });
});

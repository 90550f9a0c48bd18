import { parseCampaignSpec, SpecError } from '../../config/io/spec';
import { DataValidationError } from '../../config/rules/errors';
import { generatorReplicasOf, stepBatchProblem } from '../../config/rules/trainer-shape';
import { validateCampaignLocally } from '../../workers/validate';

/** What a round's spec asks of its trainer (issue #44, item 4): generator replicas, and a step's batch against the model's limit. */

const spec = (rest: string, provider = '') =>
  parseCampaignSpec(
    `name: shape
provider: { kind: local, model: roundhouse/tiny-chat${provider} }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 4, temperature: 1 }
${rest}`,
    '/work/x/campaign.yaml',
  );

function specProblems(rest: string, provider = ''): string {
  try {
    spec(rest, provider);
  } catch (err) {
    if (err instanceof SpecError) return err.message;
    throw err;
  }
  throw new Error('expected a SpecError');
}

const GRPO = 'round: { kind: grpo, grpo: { reward: { kind: numeric } } }';
const DPO = 'round: { kind: dpo }\nrounds: { nextData: { policy: all } }';
const NO_SAMPLES = 'evaluation: { scorer: exact, sampleAnswers: false }';
const ZERO = ', generatorReplicas: 0';

test('unset, the generator replicas follow the round: 1 where it samples (sft, grpo), 0 where it never does (dpo, sft without sampled answers)', () => {
  expect(spec('').provider.generatorReplicas).toBeUndefined();
  expect(generatorReplicasOf(spec(''))).toBe(1);
  expect(generatorReplicasOf(spec(GRPO))).toBe(1);
  expect(generatorReplicasOf(spec(DPO))).toBe(0);
  expect(generatorReplicasOf(spec(NO_SAMPLES))).toBe(0);
});

test("the spec's own provider.generatorReplicas is kept, 0 included where nothing samples", () => {
  expect(generatorReplicasOf(spec(GRPO, ', generatorReplicas: 2'))).toBe(2);
  expect(generatorReplicasOf(spec(NO_SAMPLES, ', generatorReplicas: 1'))).toBe(1);
  expect(generatorReplicasOf(spec(NO_SAMPLES, ZERO))).toBe(0);
  expect(generatorReplicasOf(spec(DPO, ZERO))).toBe(0);
});

test('provider.generatorReplicas: 0 on a round that samples is refused by the spec, naming the field and the reason', () => {
  expect(specProblems(GRPO, ZERO)).toContain(
    'provider.generatorReplicas: 0 provisions a trainer-only resource, with no generator to sample on, but a grpo round samples the groups it trains on',
  );
  expect(specProblems('', ZERO)).toContain(
    'provider.generatorReplicas: 0 provisions a trainer-only resource, with no generator to sample on, but an sft round samples an answer for every eval row after training (evaluation.sampleAnswers: false measures eval loss only)',
  );
});

test('evaluation.sampleAnswers: false is for sft, and refuses what needs sampled answers', () => {
  expect(specProblems(`${GRPO}\n${NO_SAMPLES}`)).toContain('evaluation.sampleAnswers: false is for sft rounds (this one is grpo)');
  expect(specProblems(`${DPO}\nevaluation: { scorer: exact, sampleAnswers: true }`)).toContain(
    'evaluation.sampleAnswers: is for sft rounds',
  );
  const refused = (yaml: string, field: string) =>
    expect(specProblems(yaml)).toMatch(
      new RegExp(`${field.replace(/\./g, '\\.')}: .*, and evaluation\\.sampleAnswers is false: remove one of them`),
    );
  refused('evaluation: { scorer: exact, sampleAnswers: false, every: 5, sampleEvery: 1 }', 'evaluation.sampleEvery');
  refused(`${NO_SAMPLES}\nrounds: { target: { metric: accuracy, atLeast: 0.9 } }`, 'rounds.target');
  refused(`${NO_SAMPLES}\nrounds: { max: 3 }`, 'rounds.nextData.policy');
  refused(`${NO_SAMPLES}\npromotion: { line: tickets, on: eval }`, 'promotion');
  // The default policy of a one-round campaign never reads the pool's answers: nothing to refuse.
  expect(spec(NO_SAMPLES).rounds.nextData.policy).toBe('mistakes');
});

test("a step's batch over the model's maximum is refused naming its fields: sft batchSize, dpo pairs × 2, grpo batchSize × groupSize", () => {
  const model = { name: 'm', maxBatchSize: 16 };
  expect(stepBatchProblem(spec(''), model)).toBeUndefined();
  expect(stepBatchProblem(spec(''), { name: 'm', maxBatchSize: 4 })).toBe(
    "training.batchSize: 8 = 8 sequences per forward-backward step, over m's maximum batch size of 4: make the batch smaller",
  );
  expect(stepBatchProblem(spec(DPO), model)).toBeUndefined(); // 16 sequences: at the limit
  expect(stepBatchProblem(spec(DPO), { name: 'm', maxBatchSize: 15 })).toContain('training.batchSize × 2');
  expect(stepBatchProblem(spec(GRPO), model)).toBe(
    "training.batchSize × round.grpo.groupSize: 8 × 4 = 32 sequences per forward-backward step, over m's maximum batch size of 16: make the batch smaller",
  );
});

test("`roundhouse run`'s own checks refuse a step over the emulator model's max batch size before anything starts", () => {
  const over = spec('round: { kind: grpo, grpo: { groupSize: 64, reward: { kind: numeric } } }');
  expect(() => validateCampaignLocally(over)).toThrow(
    new DataValidationError([
      "training.batchSize × round.grpo.groupSize: 8 × 64 = 512 sequences per forward-backward step, over roundhouse/tiny-chat's maximum batch size of 256: make the batch smaller",
    ]),
  );
});

import { parseCampaignSpec, SpecError } from '../../config/io/spec';
import { evaluationSampling, passAtK } from '../../config/rules/evaluation-sampling';
import { stageSpecOf } from '../../config/rules/stages';

const spec = (sampling: string, evaluation = '{ scorer: exact }', rest = '') =>
  `name: evals
provider: { kind: local, model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: ${sampling}
evaluation: ${evaluation}
${rest}`;

describe('evaluation.sampling', () => {
  test('unset, evaluation is greedy with one answer per prompt, and takes maxTokens and stop from the sampling block', () => {
    const s = parseCampaignSpec(spec('{ maxTokens: 5, temperature: 1, topP: 0.9, stop: ["\\n"] }'), '/work/x/campaign.yaml');
    expect(evaluationSampling(s)).toEqual({ temperature: 0, maxTokens: 5, stop: ['\n'], n: 1 });
  });

  test('its own fields win over the sampling block, and a seed is sent only when sampling.seed is set', () => {
    const s = parseCampaignSpec(
      spec('{ maxTokens: 5, stop: ["\\n"], seed: 11 }', '{ scorer: exact, sampling: { temperature: 0.7, maxTokens: 9, topK: 20, n: 8 } }'),
      '/work/x/campaign.yaml',
    );
    expect(evaluationSampling(s)).toEqual({ temperature: 0.7, maxTokens: 9, topK: 20, stop: ['\n'], n: 8, seed: 11 });
  });

  test('n above 1 at temperature 0 is refused, naming the field: every greedy answer would be the same', () => {
    let err: unknown;
    try {
      parseCampaignSpec(spec('{ maxTokens: 5 }', '{ scorer: exact, sampling: { n: 4 } }'), 'campaign.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SpecError);
    expect((err as SpecError).field).toBe('evaluation.sampling.temperature');
    expect((err as SpecError).message).toMatch(/must be above 0 when n is 4/);
  });

  test("more than 128 answers per prompt is refused, naming the field (the emulator's sample request takes num_samples up to 128)", () => {
    let err: unknown;
    try {
      parseCampaignSpec(spec('{ maxTokens: 5 }', '{ scorer: exact, sampling: { n: 129, temperature: 1 } }'), 'campaign.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SpecError);
    expect((err as SpecError).field).toBe('evaluation.sampling.n');
  });

  test('on a dpo round it is refused, naming the field: a dpo round samples no answers', () => {
    let err: unknown;
    try {
      parseCampaignSpec(
        spec('{ maxTokens: 5 }', '{ scorer: exact, sampling: { temperature: 0.5 } }', 'round: { kind: dpo }'),
        'campaign.yaml',
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SpecError);
    expect((err as SpecError).field).toBe('evaluation.sampling');
    expect((err as SpecError).message).toMatch(/a dpo round has none of/);
  });

  test("in a staged spec, a stage that sets only sampling keeps the campaign's evaluation, measured with its own maxTokens", () => {
    const s = parseCampaignSpec(
      spec(
        '{ maxTokens: 5 }',
        '{ scorer: exact, sampling: { n: 2, temperature: 0.5 } }',
        `stages:
  - name: sft
  - name: rl
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { reward: { kind: numeric } } }`,
      ),
      '/work/x/campaign.yaml',
    );
    expect(evaluationSampling(stageSpecOf(s, 0))).toEqual({ temperature: 0.5, maxTokens: 5, n: 2 });
    expect(evaluationSampling(stageSpecOf(s, 1))).toEqual({ temperature: 0.5, maxTokens: 3, n: 2 });
  });
});

test('pass@k is the unbiased estimator 1 − C(n−c, k)/C(n, k)', () => {
  // n 5, c 2, k 2: 1 − C(3,2)/C(5,2) = 1 − 3/10.
  expect(passAtK(5, 2, 2)).toBeCloseTo(0.7, 12);
  // k 1 is the share right; no right answer is 0; fewer wrong answers than k is 1.
  expect(passAtK(8, 3, 1)).toBeCloseTo(3 / 8, 12);
  expect(passAtK(4, 0, 4)).toBe(0);
  expect(passAtK(4, 1, 4)).toBe(1);
  expect(() => passAtK(2, 1, 3)).toThrow(/pass@3 needs at least 3 answers/);
});

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import { pythonChecksOf } from '../../config/rules/python-calls';
import { accumulatedRows, batchRows } from '../../config/rules/schedule';
import { readCompletionDataset } from '../../activities/completion-data';
import { checkedGradients } from '../../activities/custom';
import { RoundhouseFailure } from '../../config/rules/failures';
import { specError } from '../helpers/spec-text';

const spec = (round: string, more = '') => `name: c
provider: { kind: together, model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 4, temperature: 1 }
round: ${round}
${more}`;
const custom = '{ kind: custom, custom: { loss: { kind: python, name: simpo, taskQueue: losses } } }';

describe('the spec of a custom round', () => {
  test('parses with the call defaults, and the checks before spend ask the Python worker for the loss', () => {
    const s = parseCampaignSpec(spec(custom), 'campaign.yaml');
    expect(s.round.custom!.loss).toMatchObject({ kind: 'python', name: 'simpo', taskQueue: 'losses', retry: { maxAttempts: 5 } });
    expect(pythonChecksOf(s).map((c) => [c.field, c.role, c.call.name])).toEqual([['round.custom.loss', 'loss', 'simpo']]);
  });

  test.each([
    ['{ kind: custom }', 'round.custom', /is required when round.kind is custom/],
    [`${custom}\nevaluation: { scorer: exact, every: 2 }`, 'evaluation.every', /not supported for custom rounds yet/],
    [custom.replace(' } } }', ' } }, dpo: { beta: 0.1 } }'), 'round.dpo', /is only used when round.kind is dpo/],
  ])('%s is refused, naming %s', (round, field, message) => {
    const err = specError(spec(round));
    expect(err.field).toBe(field);
    expect(err.message).toMatch(message);
  });

  test('what needs sampled answers needs evaluation.sampleAnswers: true', () => {
    const err = specError(spec(custom).replace('eval: eval.jsonl }', 'eval: eval.jsonl, test: test.jsonl }'));
    expect(err.field).toBe('data.test');
    expect(err.message).toMatch(/evaluation.sampleAnswers: true/);
    expect(() => parseCampaignSpec(spec(custom, 'evaluation: { scorer: exact, sampleAnswers: true }\n'), 'c.yaml')).not.toThrow();
  });
});

describe('a python loss for GRPO', () => {
  const grpo = (loss: string) => `{ kind: grpo, grpo: { reward: { kind: numeric }, loss: ${loss} } }`;

  test('replaces the built-in loss: the checks ask for it, and its step loss is the function’s own', () => {
    const s = parseCampaignSpec(spec(grpo('{ kind: python, name: cispo, taskQueue: losses }')), 'campaign.yaml');
    expect(pythonChecksOf(s).map((c) => [c.field, c.role, c.call.name])).toEqual([['round.grpo.loss', 'loss', 'cispo']]);
  });

  test.each([
    ['{ kind: python, taskQueue: losses }', 'round.grpo.loss.name', /is required for a python loss/],
    ['{ kind: python, name: cispo, taskQueue: losses, clipLow: 0.2 }', 'round.grpo.loss.clipLow', /a python loss computes its own/],
    ['{ type: ppo, name: cispo }', 'round.grpo.loss.name', /set kind: python/],
  ])('%s is refused, naming %s', (loss, field, message) => {
    const err = specError(spec(grpo(loss)));
    expect(err.field).toBe(field);
    expect(err.message).toMatch(message);
  });

  test('on Baseten, which has no custom-loss pass, it is refused before anything starts', () => {
    const err = specError(spec(grpo('{ kind: python, name: cispo, taskQueue: losses }')).replace('kind: together', 'kind: baseten'));
    expect(err.field).toBe('round.grpo.loss.kind');
    expect(err.message).toMatch(/custom_forward_backward\), which Baseten Loops does not offer/);
  });
});

describe('training.accumulate', () => {
  test('a step is its effective batch as passes of batchSize rows: the same rows as one step of batchSize × passes', () => {
    for (const step of [0, 1, 5]) {
      const passes = accumulatedRows(step, 50, 4, 3, 7);
      expect(passes.map((p) => p.length)).toEqual(step === 4 ? [2] : passes.map(() => 4).slice(0, passes.length));
      expect(passes.flat()).toEqual(batchRows(step, 50, 12, 7).rows);
    }
    // 50 rows in effective batches of 12: the last step of an epoch has 2 rows, one short pass.
    expect(accumulatedRows(4, 50, 4, 3, 7)).toEqual([batchRows(4, 50, 12, 7).rows]);
  });

  test('a grpo round refuses it (its step is its sampled groups)', () => {
    const err = specError(
      spec('{ kind: grpo, grpo: { reward: { kind: numeric } } }').replace('maxSeqLen: 64', 'maxSeqLen: 64, accumulate: 2'),
    );
    expect(err.field).toBe('training.accumulate');
  });
});

describe("a custom round's data", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-custom-data-'));
  const file = (name: string, rows: unknown[]) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, rows.map((r) => (typeof r === 'string' ? r : JSON.stringify(r))).join('\n'));
    return f;
  };

  test('three shapes, each row keeping every field: an answer, a pair, a named map of completions', () => {
    const problems: string[] = [];
    const answers = readCompletionDataset(file('a.jsonl', [{ prompt: 'p', answer: 'a', weight: 2 }]), problems);
    const pairs = readCompletionDataset(file('b.jsonl', [{ prompt: 'p', chosen: 'c', rejected: 'r', label: 1 }]), problems);
    const map = readCompletionDataset(
      file('c.jsonl', [{ prompt: 'p', completions: { good: 'g', bad: 'b', ugly: 'u' }, kto: [1, 0, 0] }]),
      problems,
    );
    expect(problems).toEqual([]);
    expect(answers).toMatchObject({
      shape: 'answer',
      rows: [{ answer: 'a', completions: [{ name: 'answer', text: 'a' }], fields: { weight: 2 } }],
    });
    expect(pairs.rows[0]!.completions.map((c) => c.name)).toEqual(['chosen', 'rejected']);
    expect(map).toMatchObject({ shape: 'completions', rows: [{ fields: { kto: [1, 0, 0] } }] });
    expect(map.rows[0]!.completions.map((c) => c.name)).toEqual(['good', 'bad', 'ugly']);
  });

  test('every problem names the file, the line and the field', () => {
    const problems: string[] = [];
    const f = file('bad.jsonl', [
      { prompt: 'p', chosen: 'c', rejected: 'r' },
      { prompt: 'p', answer: 'a' },
      { prompt: '', chosen: 'c', rejected: 'r' },
      { prompt: 'p', chosen: 'same', rejected: 'same' },
      { prompt: 'p', completions: { a: 3 } },
      { prompt: 'p' },
      'not json',
    ]);
    readCompletionDataset(f, problems);
    expect(problems).toEqual([
      `${f}:2 (row): is a row of answer, but line 1 is one of pairs: one shape per file`,
      `${f}:3 prompt: must not be empty`,
      `${f}:4 rejected: is the same text as chosen; the pair teaches nothing`,
      `${f}:5 (row): is a row of completions, but line 1 is one of pairs: one shape per file`,
      expect.stringMatching(new RegExp(`^${f}:6 \\(row\\): has no completion`)),
      expect.stringMatching(new RegExp(`^${f}:7: not valid JSON`)),
    ]);
  });
});

describe('gradients are checked before they are sent', () => {
  const datums = [{ modelInput: [1, 2], targetTokens: [2, 3], weights: [0, 1] }];
  const record = (gradients: number[][], loss = 1) => ({
    digest: 'd',
    function: 'f',
    mode: 'train' as const,
    loss,
    metrics: {},
    gradients,
  });
  test.each([
    [record([[0, 1, 2]]), /datum 0: 3 gradients for 2 tokens/],
    [record([[0, NaN]]), /datum 0 token 1: a gradient of NaN/],
    [record([[0, 1]], Infinity), /a loss of Infinity/],
    [record([]), /gradients for 0 sequences, the batch has 1/],
  ])('%#: LossFailed, nothing sent', (r, message) => {
    expect(() => checkedGradients(r, datums, 'f', 'at step 3')).toThrow(RoundhouseFailure);
    expect(() => checkedGradients(r, datums, 'f', 'at step 3')).toThrow(message);
  });
  test('fitting gradients pass', () => {
    expect(checkedGradients(record([[0, -0.5]]), datums, 'f', 'at step 3')).toEqual([[0, -0.5]]);
  });
});

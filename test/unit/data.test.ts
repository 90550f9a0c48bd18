import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DataValidationError } from '../../config/rules/errors';
import { loadRoundData, toDatum, tokenizeRow } from '../../activities/data';
import { scoreCompletion } from '../../activities/scoring';
import { completionText } from '../../activities/scoring';
import { tokenizerFor } from '../../config/io/tokenizer';

const tokenizer = tokenizerFor('roundhouse/tiny-chat', undefined);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-data-'));

function files(train: unknown[], evalRows: unknown[], raw = false): { train: string; eval: string } {
  const t = path.join(dir, `train-${Math.random()}.jsonl`);
  const e = path.join(dir, `eval-${Math.random()}.jsonl`);
  fs.writeFileSync(t, raw ? (train as string[]).join('\n') : train.map((r) => JSON.stringify(r)).join('\n'));
  fs.writeFileSync(e, evalRows.map((r) => JSON.stringify(r)).join('\n'));
  return { train: t, eval: e };
}

function problems(f: { train: string; eval: string }, maxSeqLen = 256): string[] {
  try {
    loadRoundData(f.train, f.eval, tokenizer, { maxSeqLen });
  } catch (err) {
    if (err instanceof DataValidationError) return err.problems;
    throw err;
  }
  return [];
}

describe('data validation before provisioning (the Baseten guide checks), each naming file:line field', () => {
  const ok = { prompt: 'Ticket: refund please', answer: 'refund' };
  test('empty prompt and empty answer', () => {
    const f = files([ok, { prompt: ' ', answer: 'x' }, { prompt: 'y', answer: '' }], [{ prompt: 'other', answer: 'a' }]);
    expect(problems(f)).toEqual([`${f.train}:2 prompt: must not be empty`, `${f.train}:3 answer: must not be empty`]);
  });

  test('a prompt shared by train and eval', () => {
    const f = files([ok], [{ prompt: ok.prompt, answer: 'refund' }]);
    expect(problems(f)).toEqual([`${f.eval}:1 prompt: also in the training data (${f.train}:1); eval rows must be held out`]);
  });

  test('rows over the token limit', () => {
    const f = files([ok, { prompt: 'word '.repeat(300), answer: 'x' }], [{ prompt: 'other', answer: 'a' }]);
    expect(problems(f, 64)).toEqual([
      expect.stringMatching(new RegExp(`^${f.train.replace(/[.]/g, '\\.')}:2 prompt: \\d+ tokens with the answer, over the limit of 64`)),
    ]);
  });

  test('malformed JSON, a missing field, a chat row not ending with the assistant', () => {
    const f = files(
      [
        '{"prompt": "a", "answer": "b"}',
        '{"prompt": "a"',
        '{"prompt": "c"}',
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]}',
      ],
      [{ prompt: 'other', answer: 'a' }],
      true,
    );
    const found = problems(f);
    expect(found[0]).toMatch(new RegExp(`:2: not valid JSON`));
    expect(found[1]).toBe(`${f.train}:3 answer: is required (rows need prompt and answer, or messages)`);
    expect(found[2]).toBe(`${f.train}:4 messages.1.role: the last message must be the assistant's answer`);
  });

  test('a missing file and an empty file', () => {
    const f = { train: path.join(dir, 'absent.jsonl'), eval: path.join(dir, 'empty.jsonl') };
    fs.writeFileSync(f.eval, '\n');
    expect(problems(f)).toEqual([`${f.train}: no such file`, `${f.eval}: has no rows`]);
  });
});

describe('samples are built the way the provider expects', () => {
  test('prompt/answer rows use the chat template; only the answer (and its end-of-turn) is trained on', () => {
    const row = tokenizeRow({ line: 1, prompt: 'Ticket: my card was charged twice', answer: 'billing' }, tokenizer);
    const text = tokenizer.decode([...row.promptTokens, ...row.completionTokens]);
    expect(text).toBe('<|im_start|>user\nTicket: my card was charged twice<|im_end|>\n<|im_start|>assistant\nbilling<|im_end|>');
    expect(tokenizer.decode(row.completionTokens)).toBe('billing<|im_end|>');
    const d = toDatum(row);
    expect(d.modelInput).toHaveLength(row.promptTokens.length + row.completionTokens.length - 1);
    expect(d.targetTokens).toEqual([...row.promptTokens, ...row.completionTokens].slice(1));
    expect(d.weights.filter((w) => w === 1)).toHaveLength(row.completionTokens.length);
    expect(d.weights.slice(0, row.promptTokens.length - 1).every((w) => w === 0)).toBe(true);
  });

  test('chat rows: everything before the last assistant message is the prompt', () => {
    const row = tokenizeRow(
      {
        line: 1,
        prompt: '',
        answer: 'ok',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'ok' },
        ],
      },
      tokenizer,
    );
    expect(tokenizer.decode(row.promptTokens)).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  test('a completion is read up to end-of-turn or a stop string, and scored', () => {
    const tokens = [...tokenizer.encode('billing'), tokenizer.tokenId('<|im_end|>')!, ...tokenizer.encode('junk')];
    expect(completionText(tokenizer, tokens)).toBe('billing');
    expect(completionText(tokenizer, tokenizer.encode('refund\nmore'), ['\n'])).toBe('refund');
    const exact = { scorer: 'exact' as const, caseSensitive: false, normalizeWhitespace: true };
    expect(scoreCompletion(exact, ' Billing ', 'billing')).toBe(true);
    expect(scoreCompletion(exact, 'billing issue', 'billing')).toBe(false);
    expect(scoreCompletion({ ...exact, scorer: 'contains' }, 'it is billing', 'billing')).toBe(true);
    expect(scoreCompletion({ ...exact, scorer: 'regex', pattern: '^answer: {answer}$' }, 'Answer: 42', '42')).toBe(true);
    expect(scoreCompletion({ ...exact, caseSensitive: true }, 'Billing', 'billing')).toBe(false);
  });
});

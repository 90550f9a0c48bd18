/**
 * Small arithmetic for the policy-gradient and preference round kinds: `What is 3 + 4?` → `7`.
 *   train.jsonl / eval.jsonl             prompt + answer rows (sft warm start, grpo with a numeric reward)
 *   pairs.train.jsonl / pairs.eval.jsonl prompt + chosen (the right sum) + rejected (a near miss), for dpo
 * Every eval prompt is held out of training. Deterministic:
 *   `npx tsx examples/arithmetic/generate.ts [outDir]`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { seededRandom } from '../../config/rules/random';

export interface Sum {
  prompt: string;
  answer: string;
  a: number;
  b: number;
}

/** Every sum a + b with 0 ≤ a, b < `limit`, shuffled by `seed`, split into train and eval. */
export function sums(limit: number, evalShare: number, seed: number): { train: Sum[]; eval: Sum[] } {
  const all: Sum[] = [];
  for (let a = 0; a < limit; a++) for (let b = 0; b < limit; b++) all.push({ prompt: `What is ${a} + ${b}?`, answer: String(a + b), a, b });
  const random = seededRandom(seed);
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  const evalCount = Math.round(all.length * evalShare);
  return { eval: all.slice(0, evalCount), train: all.slice(evalCount) };
}

const jsonl = (rows: object[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

/** Writes the four files into `dir`; returns their paths. */
export function writeArithmeticData(dir: string, options: { limit?: number; evalShare?: number; seed?: number } = {}) {
  const { train, eval: held } = sums(options.limit ?? 10, options.evalShare ?? 0.2, options.seed ?? 7);
  const random = seededRandom((options.seed ?? 7) + 1);
  const pair = (s: Sum) => {
    const miss = Math.max(0, s.a + s.b + (random() < 0.5 ? -1 : 1) * (1 + Math.floor(random() * 2)));
    return { prompt: s.prompt, chosen: s.answer, rejected: String(miss === s.a + s.b ? miss + 1 : miss) };
  };
  fs.mkdirSync(dir, { recursive: true });
  const files = {
    train: path.join(dir, 'train.jsonl'),
    eval: path.join(dir, 'eval.jsonl'),
    pairsTrain: path.join(dir, 'pairs.train.jsonl'),
    pairsEval: path.join(dir, 'pairs.eval.jsonl'),
  };
  fs.writeFileSync(files.train, jsonl(train.map(({ prompt, answer }) => ({ prompt, answer }))));
  fs.writeFileSync(files.eval, jsonl(held.map(({ prompt, answer }) => ({ prompt, answer }))));
  fs.writeFileSync(files.pairsTrain, jsonl(train.map(pair)));
  fs.writeFileSync(files.pairsEval, jsonl(held.map(pair)));
  return files;
}

if (require.main === module) {
  const out = process.argv[2] ?? path.dirname(__filename);
  const files = writeArithmeticData(out);
  console.log(Object.values(files).join('\n'));
}

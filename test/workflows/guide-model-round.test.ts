import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { tokenizerFor } from '../../config/io/tokenizer';
import { readDataset, tokenizeRow } from '../../activities/data';
import { readArtifact } from '../helpers/artifacts';
import { ledger } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

/**
 * The Baseten guide's model, `Qwen/Qwen3.5-2B`, trained by a round on the emulator with its real tokenizer (the one
 * that ships in emulator/models/qwen3.5/), with nothing in the Hugging Face cache: the rows the trainer receives are
 * Qwen3.5 token ids in Qwen3.5's chat format, and the eval completions are decoded and scored with that tokenizer.
 */

const MODEL = 'Qwen/Qwen3.5-2B';
const savedHome = process.env.HF_HOME;
const emptyHome = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-hf-empty-'));
process.env.HF_HOME = emptyHome;
afterAll(() => {
  if (savedHome === undefined) delete process.env.HF_HOME;
  else process.env.HF_HOME = savedHome;
  fs.rmSync(emptyHome, { recursive: true, force: true });
});

const { env, runRound } = roundTestEnvironment();

test('an SFT round on Qwen/Qwen3.5-2B trains Qwen3.5 token ids, scores decoded answers and releases the GPU', async () => {
  const taskQueue = uniqueTaskQueue('qwen35-round');
  const input = ticketRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `qwen35-${taskQueue}`,
    trainRows: 48,
    evalRows: 8,
    heartbeatTimeoutSeconds: 30, // the first use loads the 248k-token vocabulary (about a second, more on a busy machine)
  });
  input.spec.provider = { ...input.spec.provider, model: MODEL };
  // The answer comes after the template's closed <think> block: "\n", "</think>", "\n\n", the label, <|im_end|>.
  input.spec.sampling = { ...input.spec.sampling, maxTokens: 8 };
  input.spec.training = { ...input.spec.training, epochs: 4 };

  const result = await runRound(input, taskQueue);

  expect(result.status).toBe('completed');
  expect(result.totalSteps).toBe(24); // 48 rows / batch 8 × 4 epochs
  expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);
  const report = await readArtifact(result.reportPath);
  expect(report).toMatchObject({ status: 'completed', cleanup_status: 'deactivated' });

  // What the trainer received: every training row, once an epoch, as the Qwen3.5 tokenizer and chat template make it.
  const tokenizer = tokenizerFor(MODEL, undefined);
  const rows = readDataset(input.data.train, []).rows.map((r) => tokenizeRow(r, tokenizer));
  expect(rows[0]!.promptTokens.slice(0, 2)).toEqual([248_045, 846]); // <|im_start|>, "user"
  expect(rows[0]!.completionTokens.at(-1)).toBe(248_046); // <|im_end|>
  const l = await ledger(env.emulator);
  const resource = l.resources.find((r) => r.id === report.resource_id)!;
  expect(resource.baseModel).toBe(MODEL);
  const session = l.sessions.find((s) => s.resourceId === resource.id)!;
  expect(session.tokens.train).toBe(4 * rows.reduce((sum, r) => sum + r.promptTokens.length + r.completionTokens.length - 1, 0));
  expect(l.active).not.toContain(resource.id);
  // The emulator ends a sample at Qwen3.5's <|im_end|> (the client asks for no stop): 8 answers of 5 tokens, not 8 × 8.
  expect(session.tokens.sample).toBeLessThan(8 * 8);

  // Scored on the decoded answer after the closed <think> block the template puts before it.
  const evaluations: { expected: string; completion: string; match: boolean }[] = report.evaluations;
  expect(evaluations).toHaveLength(8);
  // After these 24 steps the trained weights answer each held-out ticket with one of the five labels, which the
  // sampled tokens only give once the reasoning block and the end of turn are cut off.
  const labels = ['billing', 'outage', 'login', 'shipping', 'refund'];
  expect(labels).toEqual(expect.arrayContaining(evaluations.map((e) => e.completion.trim().toLowerCase())));
  expect(result.accuracy).toBe(evaluations.filter((e) => e.match).length / evaluations.length);
  process.stderr.write(
    `[qwen3.5 round] loss ${result.baselineLoss!.toFixed(3)} → ${result.trainedLoss!.toFixed(3)}, accuracy ${result.accuracy}, ` +
      `completions ${JSON.stringify(evaluations.map((e) => e.completion))}\n`,
  );
});

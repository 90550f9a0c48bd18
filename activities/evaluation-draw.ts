import { Context } from '@temporalio/activity';
import type { EvaluationSpec } from '../config/io/spec';
import type { TextTokenizer } from '../config/io/tokenizer';
import { passAtK, type EvaluationSampling } from '../config/rules/evaluation-sampling';
import type { OperationHandle, SampleResult, TrainingProvider } from '../providers/types';
import type { TokenizedRow } from './data';
import { keepingAlive } from './failures';
import { completionText, scoreCompletion } from './scoring';

/**
 * Evaluation's draw: every prompt in one sample request, with `n` answers each (Together's and the emulator's sample
 * takes a batch of prompts; Tinker's client turns it into one asynchronous request per prompt, Baseten's into
 * requests on its sampler, bounded there), instead of serial batches awaited one after the other. Sets larger than
 * `EVAL_PROMPTS_PER_REQUEST` go in several requests, all submitted before any is awaited. Keys name the request's
 * part of the set, so a retried activity gets the same operations back and nothing is sampled twice.
 */
/** Our bound on one request's prompts (we found no documented sampling batch limit): keeps a response's size in reason. */
export const EVAL_PROMPTS_PER_REQUEST = 1024;

/** One answer drawn for one row; `score` only with a python scorer (null: unscorable). */
export interface SampledAnswer {
  row: TokenizedRow;
  /** Which of the row's `n` answers (0-based). */
  sample: number;
  completion: string;
  match: boolean;
  score?: number | null;
}

/** One row as the evaluations file keeps it: its first answer, and with n > 1 every answer and how many were right. */
export interface Evaluation {
  line: number;
  prompt: string;
  expected: string;
  completion: string;
  match: boolean;
  score?: number | null;
  samples?: { completion: string; match: boolean; score?: number | null }[];
  correct?: number;
}

export async function drawAnswers(request: {
  provider: TrainingProvider;
  sessionId: string;
  /** The key of request `part` (its first prompt is row `part × EVAL_PROMPTS_PER_REQUEST`). */
  keyOf: (part: number) => string;
  rows: TokenizedRow[];
  tokenizer: TextTokenizer;
  sampling: EvaluationSampling;
  /** The stop strings the sampler is sent (config/rules/sampling.ts stopToSend); answers are cut at `sampling.stop` in code either way. */
  stopSent: string[] | undefined;
  /** The seed request `part` sends (config/rules/sampling.ts drawSeed), or none. */
  seedOf: (part: number) => number | undefined;
  evaluation: EvaluationSpec;
}): Promise<SampledAnswer[]> {
  const { provider, rows, sampling: s } = request;
  const parts: TokenizedRow[][] = [];
  for (let i = 0; i < rows.length; i += EVAL_PROMPTS_PER_REQUEST) parts.push(rows.slice(i, i + EVAL_PROMPTS_PER_REQUEST));
  const signal = Context.current().cancellationSignal;
  const results = await keepingAlive(async () => {
    const handles: OperationHandle<SampleResult[]>[] = [];
    for (const [i, part] of parts.entries())
      handles.push(
        await provider.submitSample(
          request.sessionId,
          request.keyOf(i),
          part.map((r) => r.promptTokens),
          {
            maxTokens: s.maxTokens,
            temperature: s.temperature,
            topP: s.topP,
            topK: s.topK,
            // Cut in code below either way, as Tinker rounds always did: a provider may return the stop string itself.
            stop: request.stopSent,
            seed: request.seedOf(i),
          },
          { numSamples: s.n },
        ),
      );
    const answered: SampleResult[] = [];
    for (const h of handles) answered.push(...(await provider.awaitOperation(h, { signal })));
    return answered;
  });
  const scorer = request.evaluation.scorer;
  return rows.flatMap((row, i) =>
    Array.from({ length: s.n }, (_v, j): SampledAnswer => {
      const completion = completionText(request.tokenizer, results[i]?.sequences[j]?.tokens ?? [], s.stop);
      // A python scorer's verdicts come later, from its worker.
      const match = typeof scorer === 'object' ? false : scoreCompletion(request.evaluation, completion, row.answer);
      return { row, sample: j, completion, match };
    }),
  );
}

/**
 * The evaluations file's rows (one per eval row, as with n = 1 always) and the figures: pass@1 (right answers over
 * all answers; with a python scorer the mean score over the answers it could score, as before) and, with n > 1, the
 * unbiased pass@n averaged over the rows.
 */
export function evaluationsOf(
  answers: SampledAnswer[],
  n: number,
  scoredByPython: boolean,
): { evaluations: Evaluation[]; correct: number; accuracy: number; passAtK?: { k: number; value: number } } {
  const evaluations: Evaluation[] = [];
  for (let i = 0; i < answers.length; i += n) {
    const drawn = answers.slice(i, i + n);
    const first = drawn[0]!;
    const kept = ({ completion, match, score }: SampledAnswer) => ({ completion, match, ...(score !== undefined ? { score } : {}) });
    evaluations.push({
      line: first.row.line,
      prompt: first.row.prompt,
      expected: first.row.answer,
      ...kept(first),
      ...(n > 1 ? { samples: drawn.map(kept), correct: drawn.filter((a) => a.match).length } : {}),
    });
  }
  const correct = answers.filter((a) => a.match).length;
  const scored = answers.filter((a) => typeof a.score === 'number');
  const accuracy = scoredByPython
    ? scored.length
      ? scored.reduce((sum, a) => sum + (a.score ?? 0), 0) / scored.length
      : 0
    : answers.length
      ? correct / answers.length
      : 0;
  const passAtN =
    n > 1 && evaluations.length ? evaluations.reduce((sum, e) => sum + passAtK(n, e.correct ?? 0, n), 0) / evaluations.length : undefined;
  return { evaluations, correct, accuracy, ...(passAtN !== undefined ? { passAtK: { k: n, value: passAtN } } : {}) };
}

import type { EvaluationSpec } from '../config/io/spec';
import type { TextTokenizer } from '../config/io/tokenizer';

function normalize(text: string, spec: EvaluationSpec): string {
  let out = spec.normalizeWhitespace ? text.trim().replace(/\s+/g, ' ') : text;
  if (!spec.caseSensitive) out = out.toLowerCase();
  return out;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Whether a completion counts as right: exact match, containment, or a regex (with `{answer}` filled in). */
export function scoreCompletion(spec: EvaluationSpec, completion: string, expected: string): boolean {
  if (typeof spec.scorer === 'object') throw new Error(`a python scorer ('${spec.scorer.name}') runs on its Python worker`);
  const got = normalize(completion, spec);
  const want = normalize(expected, spec);
  switch (spec.scorer) {
    case 'exact':
      return got === want;
    case 'contains':
      return want.length > 0 && got.includes(want);
    case 'regex': {
      const pattern = (spec.pattern ?? '').replace('{answer}', escapeRegExp(want));
      return new RegExp(pattern, spec.caseSensitive ? '' : 'i').test(got);
    }
    case 'numeric': {
      const a = finalNumber(completion);
      const b = finalNumber(expected);
      return a !== undefined && b !== undefined && Math.abs(a - b) <= 1e-6;
    }
  }
}

/** The final number of a GSM8K-style text: after the last `####` if there is one, else the last number in it. */
export function finalNumber(text: string): number | undefined {
  const marked = text.lastIndexOf('####');
  const tail = marked >= 0 ? text.slice(marked + 4) : text;
  const numbers = tail.replace(/(\d),(?=\d{3}\b)/g, '$1').match(/-?\d+(?:\.\d+)?/g);
  if (!numbers?.length) return undefined;
  return Number(marked >= 0 ? numbers[0] : numbers[numbers.length - 1]);
}

/**
 * The completion as text: up to the first end-of-sequence token or stop string, without them, and after a thinking
 * model's reasoning (what ends in `</think>`, as Qwen3's chat templates split it): the reasoning is not the answer.
 */
export function completionText(tokenizer: TextTokenizer, tokens: number[], stop?: string[]): string {
  const eos = new Set(tokenizer.eosTokenIds);
  const end = tokens.findIndex((t) => eos.has(t));
  let text = tokenizer.decode(end >= 0 ? tokens.slice(0, end) : tokens, { skipSpecialTokens: true });
  const thought = text.lastIndexOf('</think>');
  if (thought >= 0) text = text.slice(thought + '</think>'.length).replace(/^\n+/, '');
  for (const s of stop ?? []) {
    const at = text.indexOf(s);
    if (at >= 0) text = text.slice(0, at);
  }
  return text;
}

/**
 * A completion's tokens through the one that completes its first stop string, as a sampler that honours stop strings
 * returns them; Tinker takes none (the client cuts in code), so its tokens run on past the stop. Cut here, the tokens
 * trained on end where `completionText` cut the text the reward or the environment saw. No stop in the text (up to an
 * end-of-sequence token): the tokens as they are.
 */
export function tokensThroughStop(tokenizer: TextTokenizer, tokens: number[], stop?: string[]): number[] {
  if (!stop?.length) return tokens;
  const eos = new Set(tokenizer.eosTokenIds);
  const end = tokens.findIndex((t) => eos.has(t));
  const searched = end >= 0 ? end : tokens.length;
  const stopsWithin = (n: number) => {
    const text = tokenizer.decode(tokens.slice(0, n), { skipSpecialTokens: true });
    return stop.some((s) => s.length > 0 && text.includes(s));
  };
  if (!stopsWithin(searched)) return tokens;
  // A prefix's text extends a shorter prefix's, so "holds a stop" turns true once: the first such prefix, by bisection.
  let low = 1;
  let high = searched;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (stopsWithin(mid)) high = mid;
    else low = mid + 1;
  }
  return tokens.slice(0, low);
}

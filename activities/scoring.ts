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

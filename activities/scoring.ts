import type { EvaluationSpec } from '../config/spec';

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
  }
}

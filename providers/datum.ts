import { ProviderError } from './errors';
import type { Datum } from './types';

/** A datum's three arrays must be non-empty and aligned; refused before anything is sent. */
export function checkDatum(d: Datum, index: number): void {
  if (d.modelInput.length === 0) throw new ProviderError('INVALID_INPUT', 'non-retryable', `datum ${index} has an empty model input`);
  if (d.targetTokens.length !== d.modelInput.length || d.weights.length !== d.modelInput.length) {
    throw new ProviderError(
      'INVALID_INPUT',
      'non-retryable',
      `datum ${index}: modelInput (${d.modelInput.length}), targetTokens (${d.targetTokens.length}) and weights (${d.weights.length}) must have the same length`,
    );
  }
}

/** A policy loss needs each datum's sampler logprobs and advantages (and, when asked, reference logprobs), aligned with its targets. */
export function checkPolicyDatum(d: Datum, index: number, needReference: boolean): void {
  checkDatum(d, index);
  const fields: ['logprobs' | 'advantages' | 'referenceLogprobs', boolean][] = [
    ['logprobs', true],
    ['advantages', true],
    ['referenceLogprobs', needReference],
  ];
  for (const [field, required] of fields) {
    const v = d[field];
    if (v === undefined) {
      if (required) throw new ProviderError('INVALID_INPUT', 'non-retryable', `datum ${index} has no ${field}, which this loss needs`);
      continue;
    }
    if (v.length !== d.targetTokens.length) {
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        `datum ${index}: ${field} (${v.length}) must have one value per target token (${d.targetTokens.length})`,
      );
    }
    if (v.some((x) => typeof x !== 'number' || !Number.isFinite(x))) {
      throw new ProviderError('INVALID_INPUT', 'non-retryable', `datum ${index}: ${field} must be finite numbers`);
    }
  }
}

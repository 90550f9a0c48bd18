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

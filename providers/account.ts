import { createHash } from 'node:crypto';

/**
 * Names a provider endpoint + account without revealing either's secret: the first 16 hex digits of a sha256 over
 * the base URL and the API key. Per-account coordination (the provision gate's workflow id) is keyed on it; the key
 * itself never leaves the provider object.
 */
export function accountFingerprint(baseUrl: string, apiKey: string): string {
  return createHash('sha256').update(`roundhouse-account\n${baseUrl}\n${apiKey}`).digest('hex').slice(0, 16);
}

import { createHash, randomUUID } from 'node:crypto';

export function shortId(prefix: string): string {
  return `${prefix}-${randomUUID().replace(/-/g, '').slice(0, 12)}`;
}

/** Owners are derived from API keys, so each key sees only its own records. */
export function ownerOf(apiKey: string): string {
  return `user-${createHash('sha256').update(apiKey).digest('hex').slice(0, 10)}`;
}

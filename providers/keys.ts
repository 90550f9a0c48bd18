import { createHash } from 'node:crypto';

/** A key the provider is sent, naming an operation for good: derived from (resource, caller key), 32 hex like the SDKs'. */
export function operationKey(resourceId: string, key: string): string {
  return createHash('sha256').update(`${resourceId}\u0000${key}`).digest('hex').slice(0, 32);
}

/** A checkpoint name (part of a bt:// or tinker:// path) from a caller key: readable, and unique by a hash of the key. */
export function checkpointName(key: string): string {
  const readable = key
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(-80);
  return `${readable || 'checkpoint'}-${createHash('sha256').update(key).digest('hex').slice(0, 8)}`;
}

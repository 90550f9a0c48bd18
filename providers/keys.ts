import { createHash } from 'node:crypto';

/** A key the provider is sent, naming an operation for good: derived from (resource, caller key), 32 hex like the SDKs'. */
export function operationKey(resourceId: string, key: string): string {
  return createHash('sha256').update(`${resourceId}\u0000${key}`).digest('hex').slice(0, 32);
}

/**
 * A checkpoint name (part of a bt:// or tinker:// path) from a caller key: readable, and unique by a hash of the key.
 * Only `[A-Za-z0-9_-]`, at most 89 characters: what every service takes (SkyRL's Tinker server refuses any other
 * character, a campaign's `.` included, and names over 255).
 */
export function checkpointName(key: string): string {
  const readable = key
    .replace(/[^A-Za-z0-9_-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(-80);
  return `${readable || 'checkpoint'}-${createHash('sha256').update(key).digest('hex').slice(0, 8)}`;
}

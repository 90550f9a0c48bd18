import path from 'node:path';
import { ConfigError } from '../rules/errors';

/**
 * Where rounds keep what they write (samples, reference logprobs, step records, reports) and where uploaded data
 * lives: a location is a local path (or `file://` URL) or an `s3://bucket/key` URI, and every reader and writer goes
 * through the store for its scheme. Workers on separate hosts share an S3 bucket (AWS, R2, GCS interop, SeaweedFS,
 * MinIO); a local directory is the default, so the embedded quickstart needs nothing.
 *
 * Writes are atomic: a reader sees the old object or the new one, never part of one (a rename on disk; a single PUT
 * on S3). Inputs are stored content-addressed (sha256 in the key), so a retried activity finds what the first wrote.
 */
export interface ArtifactStore {
  /** The object's bytes, or undefined when there is none. */
  read(location: string): Promise<Buffer | undefined>;
  write(location: string, body: Buffer | string, contentType?: string): Promise<void>;
  /** Writes only where nothing is yet (O_EXCL-like link on disk, `If-None-Match: *` on S3): false when one was first. */
  create(location: string, body: Buffer | string, contentType?: string): Promise<boolean>;
  /** The locations of the objects directly or deeply under `prefix` (a "directory"), sorted. */
  list(prefix: string): Promise<string[]>;
  exists(location: string): Promise<boolean>;
}

export const ARTIFACTS_ENV = 'ROUNDHOUSE_ARTIFACTS';

/** The artifact root: ROUNDHOUSE_ARTIFACTS (a directory, `file://` URL or `s3://bucket/prefix`), else `<stateDir>`. */
export function artifactRoot(env: NodeJS.ProcessEnv, stateDir: string): string {
  const value = env[ARTIFACTS_ENV]?.trim();
  if (!value) return path.resolve(stateDir);
  if (value.startsWith('s3://')) {
    const { bucket } = parseS3(value, ARTIFACTS_ENV);
    if (!bucket) throw new ConfigError(ARTIFACTS_ENV, `'${value}' names no bucket (s3://bucket/prefix)`);
    return value.replace(/\/+$/, '');
  }
  if (value.startsWith('file://')) return path.resolve(new URL(value).pathname);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value))
    throw new ConfigError(ARTIFACTS_ENV, `'${value}': only a directory, file:// or s3:// is supported`);
  return path.resolve(value);
}

export function isS3(location: string): boolean {
  return location.startsWith('s3://');
}

/** `base/part/part`, for paths and URIs alike (what the workflows do with string concatenation). */
export function joinLocation(base: string, ...parts: string[]): string {
  return isS3(base) ? [base.replace(/\/+$/, ''), ...parts].join('/') : path.join(base, ...parts);
}

export function parseS3(uri: string, field = 'location'): { bucket: string; key: string } {
  const match = /^s3:\/\/([^/]*)\/?(.*)$/.exec(uri);
  if (!match) throw new ConfigError(field, `'${uri}' is not an s3://bucket/key URI`);
  return { bucket: match[1]!, key: match[2]! };
}

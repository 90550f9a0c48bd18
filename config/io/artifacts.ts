import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { isS3, joinLocation, parseS3, type ArtifactStore } from './artifact-store';
import { maskSecretsIn } from './secrets';

export { ARTIFACTS_ENV, artifactRoot, isS3, joinLocation, parseS3, type ArtifactStore } from './artifact-store';

export function sha256(body: Buffer | string): string {
  return createHash('sha256').update(body).digest('hex');
}

const fileStore: ArtifactStore = {
  async read(location) {
    try {
      return await fs.promises.readFile(localPath(location));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  },
  async write(location, body) {
    writeFileAtomic(localPath(location), body);
  },
  async create(location, body) {
    return createFileOnce(localPath(location), body);
  },
  async list(prefix) {
    const root = localPath(prefix);
    const out: string[] = [];
    const walk = (dir: string) => {
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(dir, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return;
        throw err;
      }
      for (const e of entries) {
        const full = path.join(dir, e.name);
        if (e.isDirectory()) walk(full);
        else if (!e.name.endsWith('.partial')) out.push(full);
      }
    };
    walk(root);
    return out.sort();
  },
  async exists(location) {
    return fs.existsSync(localPath(location));
  },
};

function localPath(location: string): string {
  return location.startsWith('file://') ? new URL(location).pathname : location;
}

/**
 * The store's modes: not world-readable, since it holds test-set answers and episode tokens, and model-written code
 * in a sandbox runs as another uid on the same host.
 */
export const STORE_FILE_MODE = 0o640;
export const STORE_DIR_MODE = 0o750;

/** Temp file, fsync, rename: readers see the old file or the new one, never half of one. */
export function writeFileAtomic(file: string, body: Buffer | string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: STORE_DIR_MODE });
  const partial = `${file}.${process.pid}.${Date.now()}.partial`;
  const fd = fs.openSync(partial, 'w', STORE_FILE_MODE);
  try {
    fs.writeFileSync(fd, body);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(partial, file);
}

/** Temp file, fsync, then a hard link to the name: the link fails with EEXIST when another writer was first. */
function createFileOnce(file: string, body: Buffer | string): boolean {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const partial = `${file}.${process.pid}.${Date.now()}.partial`;
  const fd = fs.openSync(partial, 'w');
  try {
    fs.writeFileSync(fd, body);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    fs.linkSync(partial, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    fs.unlinkSync(partial);
  }
}

let s3: Promise<ArtifactStore> | undefined;

/** The S3 store, made once from the usual AWS environment; loaded on first use, so a deployment without S3 never loads the AWS SDK. */
const s3Store = (): Promise<ArtifactStore> =>
  // createRequire, not import(): a dynamic import of a TypeScript source is not hooked when the CLI runs through tsx.
  (s3 ??= Promise.resolve().then(() =>
    (createRequire(__filename)('./artifacts-s3') as typeof import('./artifacts-s3')).s3StoreFromEnv(process.env),
  ));

const lazyS3: ArtifactStore = {
  read: async (location) => (await s3Store()).read(location),
  write: async (location, body, contentType) => (await s3Store()).write(location, body, contentType),
  create: async (location, body, contentType) => (await s3Store()).create(location, body, contentType),
  list: async (prefix) => (await s3Store()).list(prefix),
  exists: async (location) => (await s3Store()).exists(location),
};

/** The store for a location's scheme. */
export function storeFor(location: string): ArtifactStore {
  return isS3(location) ? lazyS3 : fileStore;
}

export async function readText(location: string): Promise<string | undefined> {
  return (await storeFor(location).read(location))?.toString('utf8');
}

export async function readJson<T>(location: string): Promise<T | undefined> {
  const text = await readText(location);
  return text === undefined ? undefined : (JSON.parse(text) as T);
}

/** Writes JSON (reports, summaries, records) with every registered secret masked: what is stored is read by people. */
export async function writeJson(location: string, value: unknown): Promise<void> {
  await storeFor(location).write(location, `${JSON.stringify(maskSecretsIn(value), null, 2)}\n`, 'application/json');
}

/** Writes JSON only where nothing is yet (secrets masked as `writeJson` does): false when another writer was first. */
export async function createJson(location: string, value: unknown): Promise<boolean> {
  return storeFor(location).create(location, `${JSON.stringify(maskSecretsIn(value), null, 2)}\n`, 'application/json');
}

/**
 * A local file with the location's bytes, for readers that need a file (datasets): the path itself when local; an
 * S3 object is downloaded to a cache under the OS temp dir (kept when its key is content-addressed, else fetched anew).
 */
export async function localCopy(location: string): Promise<string> {
  if (!isS3(location)) return localPath(location);
  const file = path.join(
    os.tmpdir(),
    'roundhouse-artifacts',
    sha256(location).slice(0, 32),
    path.posix.basename(parseS3(location).key) || 'object',
  );
  if (CONTENT_ADDRESSED.test(location) && fs.existsSync(file)) return file;
  const body = await storeFor(location).read(location);
  if (body === undefined) throw Object.assign(new Error(`${location}: no such object`), { code: 'ENOENT' });
  writeFileAtomic(file, body);
  return file;
}

/** A key that holds its content's sha256 (what `putContentAddressed` writes): its bytes never change. */
const CONTENT_ADDRESSED = /\/sha256-[0-9a-f]{64}[^/]*$/;

/** Stores bytes under `<root>/<dir>/sha256-<hash><suffix>` unless already there; returns that location and the hash. */
export async function putContentAddressed(
  root: string,
  dir: string,
  body: Buffer,
  suffix = '',
): Promise<{ location: string; sha256: string }> {
  const hash = sha256(body);
  const location = joinLocation(root, dir, `sha256-${hash}${suffix}`);
  const store = storeFor(location);
  if (!(await store.exists(location))) await store.write(location, body);
  return { location, sha256: hash };
}

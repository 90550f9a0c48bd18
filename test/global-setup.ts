import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadWorkerSettings } from '../config/worker-env';
import { startTemporal, type TemporalServer } from '../workers/temporal-server';
import { SHARED_BUNDLE_ENV, writeWorkflowBundle } from './helpers/temporal';
import { ensureDist } from './helpers/dist';

declare global {
  var __roundhouseTemporal: TemporalServer | undefined;
}

/**
 * One Temporal dev server for the whole jest run. Test files find it through TEMPORAL_ADDRESS, which jest's
 * workers inherit. With TEMPORAL_ADDRESS already set, the tests use that server instead.
 */
export default async function globalSetup(): Promise<void> {
  const settings = loadWorkerSettings();
  const started = Date.now();
  const server = await startTemporal(settings);
  process.env.TEMPORAL_ADDRESS = server.address;
  process.env.TEMPORAL_NAMESPACE = server.namespace;
  globalThis.__roundhouseTemporal = server;
  process.stderr.write(`\n[test] Temporal ${server.source} at ${server.address} (${Date.now() - started} ms)\n`);
  // The workflows are bundled once for the run (webpack costs several CPU-seconds); every test file's workers use it.
  const bundled = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-test-bundle-'));
  await writeWorkflowBundle(dir);
  process.env[SHARED_BUNDLE_ENV] = dir;
  process.stderr.write(`[test] workflows bundled once for the run (${Date.now() - bundled} ms)\n`);
  // Worker and CLI processes the tests start run the compiled CLI, built once here when the sources changed.
  const dist = ensureDist();
  process.stderr.write(`[test] dist/ ${dist.built ? 'built' : 'up to date'} (${dist.ms} ms)\n`);
}

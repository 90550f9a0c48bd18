import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadWorkerSettings } from '../config/io/worker-env';
import { startTemporal, type TemporalServer } from '../workers/temporal-server';
import { SHARED_BUNDLE_ENV, writeWorkflowBundle } from './helpers/temporal';
import { ensureDist } from './helpers/dist';
import { TEST_ARTIFACT_ROOT_ENV } from './helpers/artifacts';
import { startS3Server, type RunningS3 } from './helpers/s3-server';

declare global {
  var __roundhouseTemporal: TemporalServer | undefined;
  var __roundhouseS3: RunningS3 | undefined;
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
  // ROUNDHOUSE_TEST_ARTIFACTS=s3: reports go to an S3-compatible server (test/helpers/artifacts.ts).
  if (process.env.ROUNDHOUSE_TEST_ARTIFACTS === 's3') {
    const s3 = await startS3Server();
    globalThis.__roundhouseS3 = s3;
    Object.assign(process.env, s3.env);
    process.env[TEST_ARTIFACT_ROOT_ENV] = `${await s3.bucket(`roundhouse-tests-${Date.now()}`)}/tests`;
    process.stderr.write(`[test] artifacts in ${process.env[TEST_ARTIFACT_ROOT_ENV]} (${s3.endpoint})\n`);
  }
}

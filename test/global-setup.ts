import { loadWorkerSettings } from '../config/worker-env';
import { startTemporal, type TemporalServer } from '../workers/temporal-server';

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
}

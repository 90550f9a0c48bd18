import path from 'node:path';
import { startEmulator } from '../../../emulator/server';
import type { Ledger } from '../../../emulator/engine';
import type { Teardown } from './teardown';

/** The Tinker-API server the cases run against, and how a spec points at it. */
export interface Target {
  name: 'skyrl' | 'emulator' | 'emulator-tinker';
  /** The spec's `provider` section: the server, the model it serves, the tokenizer folder. */
  provider: { kind: 'tinker'; baseUrl: string; model: string; tokenizer: string };
  /** The worker's TINKER_API_KEY. */
  apiKey: string;
  /** What setting it up took, one phrase each (install, model, server start). */
  setup: string[];
  /** Where the server keeps its files (log, database, checkpoints), if anywhere. */
  files?: string;
  /** The models the server holds loaded now. */
  loadedModels(): Promise<string[]>;
}

/**
 * The repo's own emulator in this process on loopback: the command's own check, so a failure against SkyRL is SkyRL's
 * difference, not the command's. `emulator` plays SkyRL's server (its `skyrl` Tinker flavour: what FINDINGS.md
 * captured, a session timeout of 300 s as SkyRL's default); `emulator-tinker` hosted Tinker as SDK 0.38 speaks to it.
 */
export async function startEmulatorTarget(teardown: Teardown, flavor: 'skyrl' | 'tinker' = 'skyrl'): Promise<Target> {
  const started = Date.now();
  // Each operation takes 100 ms, as a remote one would: the worker-kill case needs training to last long enough to land in.
  const emulator = await startEmulator({
    port: 0,
    host: '127.0.0.1',
    operationLatencyMs: 100,
    ...(flavor === 'skyrl' ? { tinkerFlavor: 'skyrl' as const, tinkerSessionTtlMs: 300_000 } : {}),
  });
  teardown.add(() => emulator.close());
  return {
    name: flavor === 'skyrl' ? 'emulator' : 'emulator-tinker',
    provider: {
      kind: 'tinker',
      baseUrl: emulator.url,
      model: 'roundhouse/tiny-chat',
      tokenizer: path.resolve(__dirname, '../../../emulator/models/tiny-chat'),
    },
    apiKey: flavor === 'skyrl' ? 'conformance-emulator' : 'tml-conformance-emulator', // SkyRL's server checks no key
    setup: [`emulator (${flavor} flavour) start ${((Date.now() - started) / 1000).toFixed(1)} s`],
    async loadedModels() {
      const ledger = (await (await fetch(`${emulator.url}/_emulator/ledger`)).json()) as Ledger;
      return ledger.active;
    },
  };
}

import fs from 'node:fs';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import { registerEnvironmentSecrets, registerSecret } from '../config/io/secrets';
import type { ProviderSpec } from '../config/io/spec';
import { abilitiesOf, type Dialect, type Wire } from '../config/rules/dialects';
import { startEmulator, type RunningEmulator } from '../emulator/server';
import { BASETEN_DEFAULT_BASE_URL, BasetenProvider } from '../providers/baseten/client';
import { TINKER_DEFAULT_BASE_URL, TinkerProvider, isHostedTinker } from '../providers/tinker/client';
import { TogetherProvider } from '../providers/together/client';
import type { TrainingProvider } from '../providers/types';

/** The key the worker uses against its own emulator (the emulator derives the account from it). */
export const LOCAL_EMULATOR_KEY = 'roundhouse-local';

/** Each wire's client, and the worker's environment variable holding its API key. */
const CLIENTS: Record<Wire, { keyVariable: string; create(baseUrl: string | undefined, apiKey: string): TrainingProvider }> = {
  together: { keyVariable: 'TOGETHER_API_KEY', create: (baseUrl, apiKey) => new TogetherProvider({ baseUrl, apiKey }) },
  baseten: {
    keyVariable: 'BASETEN_API_KEY',
    create: (baseUrl, apiKey) => new BasetenProvider({ baseUrl: baseUrl ?? BASETEN_DEFAULT_BASE_URL, apiKey }),
  },
  tinker: {
    keyVariable: 'TINKER_API_KEY',
    create: (baseUrl, apiKey) => {
      const url = baseUrl ?? TINKER_DEFAULT_BASE_URL;
      // A self-hosted server (SkyRL's) takes whatever key it is given; the hosted service's start `tml-`.
      if (isHostedTinker(url) && !apiKey.startsWith('tml-') && !apiKey.startsWith('eyJ'))
        throw ApplicationFailure.nonRetryable("TINKER_API_KEY must start with 'tml-' for the hosted Tinker service", 'InvalidInput');
      return new TinkerProvider({ baseUrl: url, apiKey, onSecret: (jwt) => registerSecret(jwt, { rotating: true }) });
    },
  },
};

export interface ProviderRegistryOptions {
  env?: NodeJS.ProcessEnv;
  /** Where `kind: local` goes when the spec gives no baseUrl: ROUNDHOUSE_EMULATOR_URL, else an embedded emulator. */
  stateDir: string;
}

/**
 * Builds providers for specs, once per (kind, base URL). API keys come from the worker's environment only
 * (TOGETHER_API_KEY, BASETEN_API_KEY, TINKER_API_KEY), never from workflow inputs; they and the JWTs a Tinker client
 * obtains are registered as secrets (config/secrets.ts), so nothing this process logs or sends carries them.
 */
export class ProviderRegistry {
  private readonly providers = new Map<string, TrainingProvider>();
  private embedded: Promise<RunningEmulator> | undefined;
  private readonly env: NodeJS.ProcessEnv;

  constructor(private readonly options: ProviderRegistryOptions) {
    this.env = options.env ?? process.env;
    registerEnvironmentSecrets(this.env);
  }

  /**
   * The local emulator's URL: ROUNDHOUSE_EMULATOR_URL, else the one this process embeds (state in
   * <stateDir>/emulator, its URL written to <stateDir>/emulator-url so commands like `roundhouse reap` find it).
   */
  async localEmulatorUrl(options: { start?: boolean } = {}): Promise<string> {
    if (this.env.ROUNDHOUSE_EMULATOR_URL) return this.env.ROUNDHOUSE_EMULATOR_URL;
    const urlFile = path.join(this.options.stateDir, 'emulator-url');
    if (!this.embedded && options.start === false && fs.existsSync(urlFile)) return fs.readFileSync(urlFile, 'utf8').trim();
    this.embedded ??= startEmulator({ port: 0, stateDir: path.join(this.options.stateDir, 'emulator'), provisioningDelayMs: 500 }).then(
      (e) => {
        fs.mkdirSync(this.options.stateDir, { recursive: true });
        fs.writeFileSync(urlFile, e.url);
        return e;
      },
    );
    return (await this.embedded).url;
  }

  async providerFor(spec: ProviderSpec): Promise<TrainingProvider> {
    const { embedded } = abilitiesOf(spec.kind);
    const baseUrl = embedded ? (spec.baseUrl ?? (await this.localEmulatorUrl())) : spec.baseUrl;
    const id = `${spec.kind}|${baseUrl ?? 'default'}`;
    let provider = this.providers.get(id);
    if (!provider) {
      provider = this.create(spec.kind, baseUrl);
      this.providers.set(id, provider);
    }
    return provider;
  }

  /** The dialect's client for its wire, with the emulator's key where it is embedded, else the worker's own. */
  private create(kind: Dialect, baseUrl: string | undefined): TrainingProvider {
    const { speaks, embedded } = abilitiesOf(kind);
    const client = CLIENTS[speaks];
    const apiKey = embedded ? LOCAL_EMULATOR_KEY : this.env[client.keyVariable];
    if (!apiKey) throw ApplicationFailure.nonRetryable(`${client.keyVariable} is not set in the worker environment`, 'InvalidInput');
    return client.create(baseUrl, apiKey);
  }

  async close(): Promise<void> {
    for (const p of this.providers.values()) await p.close();
    this.providers.clear();
    if (this.embedded) await (await this.embedded).close();
  }
}

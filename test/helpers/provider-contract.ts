import type { Datum, TrainingProvider } from '../../providers/types';
import { basetenProvider, ledger, setFaults, startTestEmulator, tinkerProvider, togetherProvider, type RunningEmulator } from './emulator';

/**
 * The provider contract's fixtures (test/providers/contract*.test.ts): one suite, run against every provider over
 * loopback HTTP to the emulator. Where a dialect's wire differs (routes, how many wire operations one call takes) the
 * fixture says so; the behaviour asserted is the same.
 */

export interface ProviderFixture {
  name: string;
  /** The Tinker-API server the emulator plays: hosted Tinker (default) or SkyRL's self-hosted one. */
  tinkerFlavor?: 'skyrl';
  /** The models listed: the emulator's (with their limits), or the one a self-hosted server serves (limits unsaid). */
  models?: 'served';
  make(emulator: RunningEmulator): TrainingProvider;
  /** Path patterns of the submits and the resource create, for faults aimed at them. */
  paths: { forwardBackward: string; optimStep: string; create: string };
  /** Wire operations behind one `submitSamplerWeights` (Together: weights-sync + inference checkpoint). */
  samplerWeightsOperations: number;
  /**
   * When a create's answer is lost: the caller reconciles (Together), the provider finds the run itself (Baseten,
   * Tinker), or, where nothing can be found and an empty resource holds nothing (a SkyRL session), makes it again.
   */
  lostCreate: 'needs-reconcile' | 'adopted' | 'recreated';
  /**
   * What the resource bills: GPU time while it is ready (Together, Baseten), or nothing of its own (Tinker: a session
   * is free, its models' tokens are billed).
   */
  billing: 'gpu-time' | 'tokens';
  /** Where a resubmitted key is recognised: at the service (its idempotency key), or in the client (Tinker: the key keeps its seq_id). */
  resubmission: 'service' | 'client';
  /**
   * When the trainer dies mid-run: the resource fails with it (a GPU deployment), or only the session does (Tinker:
   * the model), or the resource is taken as failed because the server cannot say whether it lives (SkyRL: a model
   * "not loaded" may have expired with its session).
   */
  trainerDeath: 'resource' | 'session' | 'unattributed';
}

export const FIXTURES: ProviderFixture[] = [
  {
    name: 'together',
    make: (e) => togetherProvider(e),
    paths: { forwardBackward: '/operations/forward-backward$', optimStep: '/operations/optim-step$', create: '/v1/rl/model-resources$' },
    samplerWeightsOperations: 2,
    lostCreate: 'needs-reconcile',
    billing: 'gpu-time',
    resubmission: 'service',
    trainerDeath: 'resource',
  },
  {
    name: 'baseten',
    make: (e) => basetenProvider(e),
    paths: { forwardBackward: '/forward_backward$', optimStep: '/optim_step$', create: '/v1/loops/(runs|trainers)$' },
    samplerWeightsOperations: 1,
    lostCreate: 'adopted',
    billing: 'gpu-time',
    resubmission: 'service',
    trainerDeath: 'resource',
  },
  {
    name: 'tinker',
    make: (e) => tinkerProvider(e),
    paths: { forwardBackward: '/api/v1/forward_backward$', optimStep: '/api/v1/optim_step$', create: '/api/v1/create_session$' },
    samplerWeightsOperations: 1,
    lostCreate: 'adopted',
    billing: 'tokens',
    resubmission: 'client',
    trainerDeath: 'session',
  },
];
// The same client against a self-hosted server of Tinker's API (the emulator playing SkyRL 0.4.0's).
FIXTURES.push({
  ...FIXTURES.find((f) => f.name === 'tinker')!,
  name: 'tinker on a self-hosted (SkyRL) server',
  tinkerFlavor: 'skyrl',
  models: 'served',
  lostCreate: 'recreated',
  trainerDeath: 'unattributed',
});

export const MODEL = 'roundhouse/tiny-chat';

/** prompt → answer, aligned the Together way: train only on the answer tokens. */
export function datum(prompt: number[], answer: number[]): Datum {
  const full = [...prompt, ...answer];
  return {
    modelInput: full.slice(0, -1),
    targetTokens: full.slice(1),
    weights: full.slice(1).map((_t, i) => (i + 1 >= prompt.length ? 1 : 0)),
  };
}

export const batch: Datum[] = [datum([10, 11, 12, 13], [40, 41]), datum([20, 21, 22], [50, 51]), datum([30, 31, 32, 33, 34], [60])];

export type ContractEmulators = Partial<Record<'default' | 'skyrl', RunningEmulator>>;

/** The emulators the suite runs against (hosted and SkyRL-flavoured), started for the file and reset after each test. */
export function contractEmulators(): ContractEmulators {
  const emulators: ContractEmulators = {};

  beforeAll(async () => {
    emulators.default = await startTestEmulator({ provisioningDelayMs: 150, basetenPollHoldMs: 2_000 });
    emulators.skyrl = await startTestEmulator({ provisioningDelayMs: 150, tinkerFlavor: 'skyrl' });
  });

  afterAll(async () => {
    for (const e of Object.values(emulators)) await e.close();
  });

  afterEach(async () => {
    for (const e of Object.values(emulators)) await setFaults(e, {});
  });
  return emulators;
}

/** A fixture's helpers: its session's ledger entry, a ready session, and cases for the dialects a capability applies to. */
export function contractHelpers(fx: ProviderFixture, emulator: () => RunningEmulator) {
  async function sessionEntry(sessionId: string) {
    return (await ledger(emulator())).sessions.find((s) => s.id === sessionId)!;
  }

  async function readySession(provider = fx.make(emulator())) {
    const resource = await provider.provision({ model: MODEL, ownerTag: `test-${fx.name}`, generatorReplicas: 1 });
    await provider.waitReady(resource.id, { pollIntervalMs: 20 });
    const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7 });
    return { provider, resource, session };
  }
  /**
   * A case for the dialects the fixture gives a capability only. Elsewhere it is not registered: it does not apply,
   * so it neither passes nor counts as skipped.
   */
  const testWhere = (applies: boolean, name: string, body: () => Promise<void>) => {
    if (applies) test(name, body);
  };
  return { sessionEntry, readySession, testWhere };
}

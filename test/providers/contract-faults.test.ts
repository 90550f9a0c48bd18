import { ProviderError } from '../../providers/errors';
import { ledger, setFaults, type RunningEmulator } from '../helpers/emulator';
import { batch, contractEmulators, contractHelpers, FIXTURES, MODEL } from '../helpers/provider-contract';

/** The provider contract (contract.test.ts), its injected faults: each handled as the error taxonomy says. */

const emulators = contractEmulators();

describe.each(FIXTURES)('$name provider against the emulator over loopback HTTP', (fx) => {
  let emulator!: RunningEmulator;
  beforeAll(() => {
    emulator = emulators[fx.tinkerFlavor ?? 'default']!;
  });
  const { sessionEntry, readySession, testWhere } = contractHelpers(fx, () => emulator);

  describe('injected faults are handled as the taxonomy says', () => {
    test('429 and 503 answers are retried (honouring retry-after) and the call succeeds', async () => {
      const provider = fx.make(emulator);
      await setFaults(emulator, {
        seed: 3,
        rules: [
          { kind: 'http-429', max: 2, retryAfterMs: 20 },
          { kind: 'http-503', max: 2, retryAfterMs: 20 },
        ],
      });
      const models = await provider.supportedModels();
      expect(models.length).toBeGreaterThan(0);
      await provider.close();
    });

    test('connection resets before the request is handled are retried; nothing is applied twice', async () => {
      const { provider, resource, session } = await readySession();
      await setFaults(emulator, { rules: [{ kind: 'reset', method: 'POST', path: fx.paths.optimStep, max: 2 }] });
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'reset/fb', batch));
      expect(await provider.awaitOperation(await provider.submitOptimStep(session.id, 'reset/opt', { learningRate: 0.01 }))).toEqual({
        step: 1,
      });
      expect(await sessionEntry(session.id)).toMatchObject({ optimizerSteps: 1 });
      await provider.deactivate(resource.id);
      await provider.close();
    });

    test('a response lost after the work was applied: the keyed resubmission gets the original, applied once', async () => {
      const { provider, resource, session } = await readySession();
      const before = await sessionEntry(session.id);
      await setFaults(emulator, {
        rules: [
          { kind: 'lose-response', method: 'POST', path: fx.paths.forwardBackward, max: 1 },
          { kind: 'lose-response', method: 'POST', path: fx.paths.optimStep, max: 1 },
        ],
      });
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'lost/fb', batch));
      expect(await provider.awaitOperation(await provider.submitOptimStep(session.id, 'lost/opt', { learningRate: 0.01 }))).toEqual({
        step: 1,
      });
      const after = await sessionEntry(session.id);
      expect(after.optimizerSteps).toBe(1);
      expect(after.operationsSubmitted - before.operationsSubmitted).toBe(2);
      expect(after.duplicatesAbsorbed - before.duplicatesAbsorbed).toBe(2);
      await provider.deactivate(resource.id);
      await provider.close();
    });

    test('a lost create response is never blindly resent: listing finds exactly one resource, and deactivating it leaves none active', async () => {
      const provider = fx.make(emulator);
      await setFaults(emulator, { rules: [{ kind: 'lose-response', method: 'POST', path: fx.paths.create, max: 1 }] });
      const outcome: unknown = await provider.provision({ model: MODEL, ownerTag: 'lost' }).catch((e: unknown) => e);
      if (fx.lostCreate === 'needs-reconcile') {
        expect(outcome).toBeInstanceOf(ProviderError);
        expect(outcome).toMatchObject({ errorClass: 'needs-reconcile', code: 'RESPONSE_LOST' });
      } else {
        // found by its tag, or (nothing to find it by) made again: an empty session holds nothing
        expect(outcome).toMatchObject({ model: MODEL, state: fx.billing === 'tokens' ? 'ready' : 'provisioning' });
      }
      const owned = await provider.listOwnedResources({ activeOnly: true });
      expect(owned).toHaveLength(1); // created once, not twice
      await provider.deactivate(owned[0]!.id);
      expect((await ledger(emulator)).active).not.toContain(owned[0]!.id);
      expect(await provider.listOwnedResources({ activeOnly: true })).toEqual([]);
      await provider.close();
    });

    test('failed operations surface with their code: retryable for internal errors, non-retryable for bad input', async () => {
      const { provider, resource, session } = await readySession();
      await setFaults(emulator, {
        rules: [
          { kind: 'fail-operation', operation: 'optim-step', errorCode: 'INTERNAL_ERROR', max: 1 },
          { kind: 'fail-operation', operation: 'forward-backward', errorCode: 'NON_FINITE_LOSS', max: 1 },
        ],
      });
      const fb = provider.awaitOperation(await provider.submitForwardBackward(session.id, 'fail/fb', batch));
      await expect(fb).rejects.toMatchObject({ errorClass: 'non-retryable', providerCode: 'NON_FINITE_LOSS' });
      const opt = provider.awaitOperation(await provider.submitOptimStep(session.id, 'fail/opt', { learningRate: 0.01 }));
      await expect(opt).rejects.toMatchObject({ errorClass: 'retryable', providerCode: 'INTERNAL_ERROR' });
      // A failed operation applied nothing; a new key after the failure applies the step once.
      expect(await provider.awaitOperation(await provider.submitOptimStep(session.id, 'fail/opt/after-1', { learningRate: 0.01 }))).toEqual(
        { step: 1 },
      );
      await provider.deactivate(resource.id);
      await provider.close();
    });

    /** A trainer dies at the next optimizer step: the step fails as needs-reconcile and its session is failed. */
    async function trainerDiesMidRun() {
      const { provider, resource, session } = await readySession();
      await setFaults(emulator, { rules: [{ kind: 'resource-error', operation: 'optim-step', max: 1 }] });
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'die/fb', batch));
      const opt = provider.awaitOperation(await provider.submitOptimStep(session.id, 'die/opt', { learningRate: 0.01 }));
      await expect(opt).rejects.toMatchObject({ errorClass: 'needs-reconcile', providerCode: 'SESSION_NOT_ACTIVE' });
      expect(await provider.getSession(session.id)).toMatchObject({ state: 'failed' });
      return { provider, resource, session };
    }

    testWhere(
      fx.trainerDeath === 'resource',
      'a resource dying mid-run fails the session (needs-reconcile), stops billing and leaves nothing active',
      async () => {
        const { provider, resource } = await trainerDiesMidRun();
        expect(await provider.getResource(resource.id)).toMatchObject({ state: 'failed' });
        const l = await ledger(emulator);
        expect(l.active).not.toContain(resource.id);
        const billed = l.resources.find((r) => r.id === resource.id)!.gpuSeconds;
        await new Promise((r) => setTimeout(r, 60));
        expect((await ledger(emulator)).resources.find((r) => r.id === resource.id)!.gpuSeconds).toBe(billed);
        await expect(provider.deactivate(resource.id)).resolves.toMatchObject({ state: 'failed' });
        await provider.close();
      },
    );

    testWhere(
      fx.trainerDeath === 'unattributed',
      'a model dying mid-run fails its session (needs-reconcile); the resource, which may have expired with it, reads failed and is released; a new one trains',
      async () => {
        const { provider, resource, session } = await trainerDiesMidRun();
        expect(await provider.getResource(resource.id)).toMatchObject({ state: 'failed' });
        expect((await ledger(emulator)).active).not.toContain(session.id);
        await expect(provider.deactivate(resource.id)).resolves.toMatchObject({ state: 'stopped' });
        const fresh = await provider.provision({ model: MODEL, ownerTag: `test-${fx.name}` });
        const next = await provider.openSession({ resourceId: fresh.id, loraRank: 8 });
        await provider.awaitOperation(await provider.submitForwardBackward(next.id, 'die/next/fb', batch));
        await expect(provider.deactivate(fresh.id)).resolves.toMatchObject({ state: 'stopped' });
        expect((await ledger(emulator)).active).not.toContain(next.id);
        await provider.close();
      },
    );

    testWhere(
      fx.trainerDeath === 'session',
      'a model dying mid-run fails its session (needs-reconcile); the resource stays ready and takes a new session',
      async () => {
        const { provider, resource, session } = await trainerDiesMidRun();
        // The model died; its session lives on and takes a new model (what recovery reopens from a checkpoint).
        expect(await provider.getResource(resource.id)).toMatchObject({ state: 'ready' });
        await expect(provider.submitOptimStep(session.id, 'die/opt/again', { learningRate: 0.01 })).rejects.toMatchObject({
          errorClass: 'needs-reconcile',
        });
        const next = await provider.openSession({ resourceId: resource.id, loraRank: 8 });
        await provider.awaitOperation(await provider.submitForwardBackward(next.id, 'die/next/fb', batch));
        expect((await ledger(emulator)).active).not.toContain(session.id);
        await expect(provider.deactivate(resource.id)).resolves.toMatchObject({ state: 'stopped' });
        expect((await ledger(emulator)).active).not.toContain(next.id);
        await provider.close();
      },
    );

    test('persistent 5xx on a keyed call ends as retryable after the retry budget', async () => {
      const { provider, resource, session } = await readySession();
      await setFaults(emulator, { rules: [{ kind: 'http-500', path: fx.paths.optimStep, max: 100 }] });
      await expect(provider.submitOptimStep(session.id, 'down/opt', { learningRate: 0.01 })).rejects.toMatchObject({
        errorClass: 'retryable',
        status: 500,
      });
      await setFaults(emulator, {});
      expect((await sessionEntry(session.id)).optimizerSteps).toBe(0);
      await provider.deactivate(resource.id);
      await provider.close();
    });
  });
});

import type { Datum } from '../../providers/types';
import { ledger, type RunningEmulator } from '../helpers/emulator';
import { batch, contractEmulators, contractHelpers, datum, FIXTURES, MODEL } from '../helpers/provider-contract';

/**
 * The provider contract: one suite, run against every provider over loopback HTTP to the emulator. Where a
 * dialect's wire differs (routes, how many wire operations one call takes) the fixture says so; the behaviour
 * asserted is the same.
 */

const emulators = contractEmulators();

describe.each(FIXTURES)('$name provider against the emulator over loopback HTTP', (fx) => {
  let emulator!: RunningEmulator;
  beforeAll(() => {
    emulator = emulators[fx.tinkerFlavor ?? 'default']!;
  });
  const { sessionEntry, readySession, testWhere } = contractHelpers(fx, () => emulator);

  test('lists supported models with their limits (where the server says them)', async () => {
    const provider = fx.make(emulator);
    const models = await provider.supportedModels();
    if (fx.models === 'served') {
      expect(models.map((m) => m.name)).toEqual([MODEL]);
      expect(models[0]!.maxLoraRank).toBeUndefined(); // not said, so not invented
    } else {
      expect(models.map((m) => m.name)).toEqual(expect.arrayContaining([MODEL, 'Qwen/Qwen3-8B']));
      expect(models.find((m) => m.name === 'Qwen/Qwen3-8B')).toMatchObject({ vocabSize: 151_936, maxLoraRank: 64 });
    }
    await provider.close();
  });

  // A Tinker session has no provisioning and no time to bill: the token-billed case below is its counterpart.
  testWhere(
    fx.billing === 'gpu-time',
    'a GPU-time-billed resource goes through provisioning to ready, bills only while ready, and is released by deactivate',
    async () => {
      const provider = fx.make(emulator);
      const created = await provider.provision({ model: MODEL, ownerTag: 't' });
      expect(created.state).toBe('provisioning');
      expect((await ledger(emulator)).resources.find((r) => r.id === created.id)?.gpuSeconds).toBe(0);
      const ready = await provider.waitReady(created.id, { pollIntervalMs: 20 });
      expect(ready.state).toBe('ready');
      expect((await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id)).toContain(created.id);
      await new Promise((r) => setTimeout(r, 120));
      const stopped = await provider.deactivate(created.id);
      expect(['stopping', 'stopped']).toContain(stopped.state);
      const billed = (await ledger(emulator)).resources.find((r) => r.id === created.id)!.gpuSeconds;
      expect(billed).toBeGreaterThanOrEqual(0.1);
      await new Promise((r) => setTimeout(r, 100));
      const after = await ledger(emulator);
      expect(after.resources.find((r) => r.id === created.id)!.gpuSeconds).toBe(billed); // billing stopped
      expect(after.active).not.toContain(created.id);
      // Deactivate is idempotent: again, and on an id that never existed.
      await expect(provider.deactivate(created.id)).resolves.toMatchObject({ id: created.id });
      await expect(provider.deactivate('mr-doesnotexist')).resolves.toMatchObject({ state: 'stopped' });
      await provider.close();
    },
  );

  testWhere(
    fx.billing === 'tokens',
    'a token-billed resource is ready at once, bills no GPU time, counts tokens, and is released by deactivate',
    async () => {
      const { provider, resource, session } = await readySession();
      expect(resource.state).toBe('ready');
      expect((await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id)).toContain(resource.id);
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'bill/fb', batch));
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'bill/fwd', batch, { forwardOnly: true }));
      const inputTokens = batch.reduce((a, d) => a + d.modelInput.length, 0);
      expect((await sessionEntry(session.id)).tokens).toEqual({ train: inputTokens, prefill: inputTokens, sample: 0 });
      const l = await ledger(emulator);
      expect(l.resources.find((r) => r.id === session.id)?.gpuSeconds).toBe(0);
      expect(l.active).toContain(session.id); // the model is loaded…
      const stopped = await provider.deactivate(resource.id);
      expect(stopped.state).toBe('stopped');
      expect((await ledger(emulator)).active).not.toContain(session.id); // …and released with its session
      expect((await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id)).not.toContain(resource.id);
      await expect(provider.deactivate(resource.id)).resolves.toMatchObject({ id: resource.id, state: 'stopped' });
      await expect(provider.deactivate('doesnotexist')).resolves.toMatchObject({ state: 'stopped' });
      await provider.close();
    },
  );

  test('every operation of a round works: forward, forward-backward, optim-step, checkpoint, sampler weights, sample', async () => {
    const { provider, resource, session } = await readySession();
    expect(session).toMatchObject({ state: 'running', step: 0 });

    const baseline = await provider.awaitOperation(
      await provider.submitForwardBackward(session.id, 'k/fwd', batch, { forwardOnly: true, returnLogprobs: true }),
    );
    expect(baseline.loss).toBeGreaterThan(0);
    expect(baseline.logprobs?.map((l) => l.length)).toEqual(batch.map((d) => d.modelInput.length));
    // Positions outside the loss come back as logprob 0; the loss is their sum over the trained positions.
    expect(baseline.logprobs![0]![0]).toBe(0);
    expect(baseline.loss).toBeCloseTo(-baseline.logprobs!.flat().reduce((a, b) => a + b, 0), 3);

    const fb = await provider.submitForwardBackward(session.id, 'k/fb/1', batch);
    const opt = await provider.submitOptimStep(session.id, 'k/opt/1', { learningRate: 0.05 });
    expect((await provider.awaitOperation(fb)).loss).toBeCloseTo(baseline.loss, 4);
    expect(await provider.awaitOperation(opt)).toEqual({ step: 1 });

    const ckpt = await provider.awaitOperation(await provider.submitTrainingCheckpoint(session.id, 'k/ckpt'));
    expect(ckpt).toMatchObject({ step: 1 });
    expect((await provider.getSession(session.id)).trainingCheckpointIds).toEqual([ckpt.checkpointId]);
    const sampler = await provider.awaitOperation(await provider.submitSamplerWeights(session.id, 'k/sampler'));
    expect(sampler.step).toBe(1);

    const samples = await provider.awaitOperation(
      await provider.submitSample(
        session.id,
        'k/sample',
        [[10, 11, 12, 13]],
        { maxTokens: 3, temperature: 0 },
        { numSamples: 2, promptLogprobs: true },
      ),
    );
    expect(samples).toHaveLength(1);
    expect(samples[0]!.sequences).toHaveLength(2);
    expect(samples[0]!.sequences[0]!.tokens).toHaveLength(3);
    expect(samples[0]!.sequences[0]!.tokens).toEqual(samples[0]!.sequences[1]!.tokens); // greedy is deterministic
    expect(samples[0]!.promptLogprobs).toHaveLength(4);
    expect(samples[0]!.policyVersion).toBe(1); // the sampler serves the published step-1 weights

    expect(await sessionEntry(session.id)).toMatchObject({ optimizerSteps: 1, duplicatesAbsorbed: 0 });
    await provider.closeSession(session.id);
    await provider.deactivate(resource.id);
    expect((await ledger(emulator)).active).not.toContain(resource.id);
    await provider.close();
  });

  test('importance sampling with positive advantages raises the completion logprob', async () => {
    const { provider, resource, session } = await readySession();
    const completion = datum([10, 11, 12, 13], [40, 41]);
    const measure = async (key: string) =>
      provider.awaitOperation(
        await provider.submitForwardBackward(session.id, key, [completion], { forwardOnly: true, returnLogprobs: true }),
      );
    const before = await measure('is/fwd/before');
    // The sampler's logprobs are the current policy's (ratio 1); every completion token gets advantage +1.
    const rl: Datum = { ...completion, logprobs: before.logprobs![0]!, advantages: completion.weights.map((w) => (w !== 0 ? 1 : 0)) };
    const fb = await provider.submitForwardBackward(session.id, 'is/fb', [rl], { loss: { type: 'importance_sampling' } });
    const opt = await provider.submitOptimStep(session.id, 'is/opt', { learningRate: 0.05 });
    // −Σ ratio·A over the completion's tokens, with ratio 1.
    expect((await provider.awaitOperation(fb)).loss).toBeCloseTo(-completion.weights.filter((w) => w !== 0).length, 3);
    expect(await provider.awaitOperation(opt)).toEqual({ step: 1 });
    const after = await measure('is/fwd/after');
    // Cross-entropy is −(the completion's logprob): lower means the completion became more likely.
    expect(after.loss).toBeLessThan(before.loss);
    await provider.deactivate(resource.id);
    await provider.close();
  });

  test('sampling sees the old policy version until a weights sync, then the new one', async () => {
    const { provider, resource, session } = await readySession();
    const prompt = [[10, 11, 12, 13]];
    const sample = async (key: string) =>
      (await provider.awaitOperation(await provider.submitSample(session.id, key, prompt, { maxTokens: 2, temperature: 0 })))[0]!;
    const initial = (await sample('v/sample/0')).policyVersion;
    expect(initial).toBe(0);
    for (let step = 1; step <= 2; step++) {
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, `v/fb/${step}`, batch));
      expect(await provider.awaitOperation(await provider.submitOptimStep(session.id, `v/opt/${step}`, { learningRate: 0.05 }))).toEqual({
        step,
      });
    }
    expect((await sample('v/sample/before-sync')).policyVersion).toBe(0); // trained twice, not published
    const synced = await provider.awaitOperation(await provider.submitWeightsSync(session.id, 'v/sync/2'));
    expect((await sample('v/sample/after-sync')).policyVersion).toBe(synced.weightsVersion);
    expect(synced.weightsVersion).toBeGreaterThan(0);
    // A replayed sync (same key) is the same operation: the version does not move.
    expect(await provider.awaitOperation(await provider.submitWeightsSync(session.id, 'v/sync/2'))).toEqual(synced);
    await provider.deactivate(resource.id);
    await provider.close();
  });

  test('replaying a mutating call with the same key returns the original operation and applies it once', async () => {
    const { provider, resource, session } = await readySession();
    const fb1 = await provider.submitForwardBackward(session.id, 'replay/fb', batch);
    const fb2 = await provider.submitForwardBackward(session.id, 'replay/fb', batch);
    expect(fb2.operationId).toBe(fb1.operationId);
    const o1 = await provider.submitOptimStep(session.id, 'replay/opt', { learningRate: 0.01 });
    const o2 = await provider.submitOptimStep(session.id, 'replay/opt', { learningRate: 0.01 });
    expect(o2.operationId).toBe(o1.operationId);
    expect(await provider.awaitOperation(o2)).toEqual({ step: 1 });
    const c1 = await provider.submitTrainingCheckpoint(session.id, 'replay/ckpt');
    const c2 = await provider.submitTrainingCheckpoint(session.id, 'replay/ckpt');
    expect((await provider.awaitOperation(c2)).checkpointId).toBe((await provider.awaitOperation(c1)).checkpointId);
    const s1 = await provider.submitSample(session.id, 'replay/sample', [[1, 2]], { maxTokens: 2, temperature: 1, seed: 3 });
    const s2 = await provider.submitSample(session.id, 'replay/sample', [[1, 2]], { maxTokens: 2, temperature: 1, seed: 3 });
    expect(s2.operationId).toBe(s1.operationId);
    const w1 = await provider.submitSamplerWeights(session.id, 'replay/sampler');
    const w2 = await provider.submitSamplerWeights(session.id, 'replay/sampler');
    expect(w2.operationId).toBe(w1.operationId);
    await provider.awaitOperation(w2);

    const entry = await sessionEntry(session.id);
    expect(entry.optimizerSteps).toBe(1);
    // fb, opt, ckpt, sample, and the sampler weights: absorbed at the service, or never resent (the client knew the key)
    expect(entry.duplicatesAbsorbed).toBe(fx.resubmission === 'service' ? 4 + fx.samplerWeightsOperations : 0);
    expect(entry.step).toBe(1);

    // The same key with a different body is refused, not silently applied.
    await expect(provider.submitOptimStep(session.id, 'replay/opt', { learningRate: 0.5 })).rejects.toMatchObject({
      errorClass: 'non-retryable',
      providerCode: 'IDEMPOTENCY_KEY_REUSED',
    });
    await provider.deactivate(resource.id);
    await provider.close();
  });

  test('resuming from a training checkpoint continues at its step with the optimizer restored', async () => {
    const { provider, resource, session } = await readySession();
    for (let step = 1; step <= 3; step++) {
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, `resume/fb/${step}`, batch));
      await provider.awaitOperation(await provider.submitOptimStep(session.id, `resume/opt/${step}`, { learningRate: 0.02 }));
    }
    const ckpt = await provider.awaitOperation(await provider.submitTrainingCheckpoint(session.id, 'resume/ckpt'));
    expect(ckpt.step).toBe(3);

    // Step 4 on the original session…
    await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'resume/fb/4', batch));
    await provider.awaitOperation(await provider.submitOptimStep(session.id, 'resume/opt/4', { learningRate: 0.02 }));
    const original = await provider.awaitOperation(
      await provider.submitForwardBackward(session.id, 'resume/probe', batch, { forwardOnly: true }),
    );
    await provider.closeSession(session.id);

    // …equals step 4 on a session resumed with the optimizer (Adam moments matter at this learning rate).
    const resumed = await provider.openSession({
      resourceId: resource.id,
      loraRank: 8,
      fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: true },
    });
    expect(resumed.step).toBe(3);
    await provider.awaitOperation(await provider.submitForwardBackward(resumed.id, 'resumed/fb/4', batch));
    expect(await provider.awaitOperation(await provider.submitOptimStep(resumed.id, 'resumed/opt/4', { learningRate: 0.02 }))).toEqual({
      step: 4,
    });
    const continued = await provider.awaitOperation(
      await provider.submitForwardBackward(resumed.id, 'resumed/probe', batch, { forwardOnly: true }),
    );
    expect(continued.loss).toBeCloseTo(original.loss, 4);
    await provider.closeSession(resumed.id);

    // Weights only: step 0 and fresh Adam, so the same step lands somewhere else.
    const fresh = await provider.openSession({
      resourceId: resource.id,
      loraRank: 8,
      fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: false },
    });
    expect(fresh.step).toBe(0);
    await provider.awaitOperation(await provider.submitForwardBackward(fresh.id, 'fresh/fb/1', batch));
    expect(await provider.awaitOperation(await provider.submitOptimStep(fresh.id, 'fresh/opt/1', { learningRate: 0.02 }))).toEqual({
      step: 1,
    });
    const weightsOnly = await provider.awaitOperation(
      await provider.submitForwardBackward(fresh.id, 'fresh/probe', batch, { forwardOnly: true }),
    );
    expect(Math.abs(weightsOnly.loss - original.loss)).toBeGreaterThan(1e-3);
    await provider.deactivate(resource.id);
    await provider.close();
  });
});

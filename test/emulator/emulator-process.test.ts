import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { startTestEmulator, testApiKey, togetherProvider, ledger } from '../helpers/emulator';

const bin = path.resolve(__dirname, '../../bin/roundhouse.js');

test('`roundhouse emulator --port 0` prints the loopback URL it listens on and serves the ledger until SIGTERM', async () => {
  const child = spawn(process.execPath, [bin, 'emulator', '--port', '0', '--provisioning-delay-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.once('exit', (code) => reject(new Error(`emulator exited early (${code})`)));
      setTimeout(() => reject(new Error(`no URL printed: ${out}`)), 30_000);
    });
    const res = await request(`${url}/_emulator/ledger`);
    expect(await res.body.json()).toEqual({
      resources: [],
      sessions: [],
      checkpoints: [],
      active: [],
      totals: { gpuSeconds: 0, usd: 0, optimizerSteps: 0, emptyOptimizerSteps: 0, operationsSubmitted: 0, duplicatesAbsorbed: 0 },
    });
  } finally {
    child.kill('SIGTERM');
  }
  const code = await new Promise((resolve) => child.once('exit', resolve));
  expect(code).toBe(0);
});

test('`roundhouse emulator` rejects a bad flag with exit code 2', async () => {
  const child = spawn(process.execPath, [bin, 'emulator', '--rate-429', '7'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise((resolve) => child.once('exit', resolve));
  expect(code).toBe(2);
  expect(err).toMatch(/a rate is a number from 0 to 1/);
});

test('an emulator restarted on the same state folder keeps resources, sessions and checkpoints', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-emu-state-'));
  const apiKey = testApiKey();
  const first = await startTestEmulator({ stateDir });
  const p1 = togetherProvider(first, apiKey);
  const resource = await p1.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'persist' });
  const session = await p1.openSession({ resourceId: resource.id, loraRank: 4 });
  const data = [{ modelInput: [1, 2, 3], targetTokens: [2, 3, 4], weights: [0, 1, 1] }];
  await p1.awaitOperation(await p1.submitForwardBackward(session.id, 'p/fb', data));
  await p1.awaitOperation(await p1.submitOptimStep(session.id, 'p/opt', { learningRate: 0.01 }));
  const ckpt = await p1.awaitOperation(await p1.submitTrainingCheckpoint(session.id, 'p/ckpt'));
  await p1.close();
  await first.close();
  expect(fs.existsSync(path.join(stateDir, 'emulator-state.json'))).toBe(true);

  const second = await startTestEmulator({ stateDir });
  try {
    const p2 = togetherProvider(second, apiKey);
    expect(await p2.getResource(resource.id)).toMatchObject({ state: 'ready' });
    expect(await p2.getSession(session.id)).toMatchObject({ state: 'running', step: 1 });
    // The keyed optim-step is still known: replaying it returns the original, nothing applied twice.
    expect(await p2.awaitOperation(await p2.submitOptimStep(session.id, 'p/opt', { learningRate: 0.01 }))).toEqual({ step: 1 });
    const resumed = await p2.openSession({
      resourceId: resource.id,
      loraRank: 4,
      fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: true },
    });
    expect(resumed.step).toBe(1);
    await p2.deactivate(resource.id);
    expect((await ledger(second)).active).toEqual([]);
    await p2.close();
  } finally {
    await second.close();
  }
});

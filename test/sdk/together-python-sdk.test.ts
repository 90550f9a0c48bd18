import path from 'node:path';
import { ledger, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';
import { runPython, sdkVenv } from '../helpers/python-venv';

let emulator: RunningEmulator;
let python: string;

beforeAll(async () => {
  python = sdkVenv('together');
  emulator = await startTestEmulator({ provisioningDelayMs: 300 });
}, 600_000);

afterAll(async () => {
  await emulator?.close();
});

test('the official together SDK runs the minimal loop and a batch loop with sampling against the emulator unchanged', async () => {
  const apiKey = testApiKey();
  const run = await runPython(
    python,
    path.join(__dirname, 'together_loop.py'),
    { TOGETHER_BASE_URL: emulator.url, TOGETHER_API_KEY: apiKey },
    240_000,
  );
  if (run.code !== 0) throw new Error(`SDK script failed (${run.code}):\n${run.stderr.slice(-4000)}`);
  const line = run.stdout.split('\n').find((l) => l.startsWith('SUMMARY '));
  const summary = JSON.parse(line!.slice('SUMMARY '.length));

  expect(summary.models).toContain('Qwen/Qwen3.8-27B'); // the guide's model, which the script trains
  expect(summary.minimal_step).toBe(3);
  expect(summary.minimal_losses[2]).toBeLessThan(summary.minimal_losses[0]);
  expect(summary.weights_version).toBe(15);
  expect(summary.policy_version).toBe(15);
  expect(summary.greedy_correct).toBe(3); // the generator serves the trained policy after weights_sync
  expect(summary.prompt_logprobs_len).toBe(5);
  expect(summary.training_checkpoint_step).toBe(15);
  expect(summary.listed_checkpoints).toHaveLength(1);
  expect(summary.resumed_step).toBe(15);
  expect(summary.resumed_next_step).toBe(16);

  // The SDK's context managers stopped everything; the ledger agrees.
  const l = await ledger(emulator);
  const mine = l.resources.find((r) => r.id === summary.resource_id)!;
  expect(['STOPPING', 'STOPPED']).toContain(mine.status);
  expect(l.active).not.toContain(summary.resource_id);
  const sessions = l.sessions.filter((s) => s.resourceId === summary.resource_id);
  expect(sessions.map((s) => s.optimizerSteps)).toEqual(expect.arrayContaining([3, 15, 1]));
  expect(sessions.every((s) => s.status === 'STOPPED')).toBe(true);
}, 300_000);

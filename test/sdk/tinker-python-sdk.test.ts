import path from 'node:path';
import { ownerOf } from '../../emulator/engine';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { runPython, sdkVenv } from '../helpers/python-venv';

let emulator: RunningEmulator;
let python: string;

beforeAll(async () => {
  python = sdkVenv('tinker');
  emulator = await startTestEmulator({ tinkerFutureHoldMs: 2_000 });
}, 600_000);

afterAll(async () => {
  await emulator?.close();
});

test('the official tinker SDK (0.38.0) runs a pipelined supervised loop, save_state, a resume with its optimizer, sampling with on-policy logprobs and an RL loop against the emulator, set only by its base URL and key', async () => {
  const apiKey = `tml-${Date.now()}-emulator`;
  const run = await runPython(
    python,
    path.join(__dirname, 'tinker_loop.py'),
    { TINKER_BASE_URL: emulator.url, TINKER_API_KEY: apiKey, TINKER_TELEMETRY: '0', NO_PROXY: '127.0.0.1,localhost', HF_HUB_OFFLINE: '1' },
    180_000,
  );
  const line = run.stdout.split('\n').find((l) => l.startsWith('SUMMARY '));
  if (run.code !== 0 || !line) throw new Error(`SDK script failed (${run.code}):\n${run.stdout.slice(-3000)}\n${run.stderr.slice(-3000)}`);
  const summary = JSON.parse(line.slice('SUMMARY '.length));
  console.log(`tinker SDK loop: ${JSON.stringify(summary)}`);

  // Model ids are the session's, as the SDK computes them itself on a resume.
  expect(summary.model_id).toMatch(/^[0-9a-f-]{36}:train:0$/);
  expect(summary.resumed_model_id).toMatch(/^[0-9a-f-]{36}:train:0$/);
  expect(summary.resumed_model_id).not.toBe(summary.model_id);
  expect(summary.info_model).toBe('roundhouse/tiny-chat');
  expect(summary.lora_rank).toBe(8);
  // It learned: the answer tokens' summed loss fell (18 pipelined steps).
  expect(summary.steps).toBe(18);
  expect(summary.last_loss).toBeLessThan(summary.first_loss / 2);
  // One logprob per target token of each datum (model_input = sequence minus its last token).
  expect(summary.logprob_lengths).toEqual([6, 6, 6]);
  // The resumed model holds the saved weights: the same loss on the same data.
  expect(summary.resumed_eval_loss).toBeCloseTo(summary.eval_loss, 3);
  expect(summary.state_path).toBe(`tinker://${summary.model_id}/weights/sft-state`);
  expect(Number.isFinite(summary.importance_loss)).toBe(true);
  expect(Number.isFinite(summary.ppo_loss)).toBe(true);
  expect(summary.bad_token_error).toBe('RequestFailedError');
  // Sampling from the trained weights: the sampler's logprobs of its own tokens, and of the prompt, are the trainer's.
  expect(summary.sampled).toHaveLength(2); // num_samples, each up to max_tokens (4)
  expect(summary.sampled.every((n: number) => n >= 1 && n <= 4)).toBe(true);
  expect(summary.on_policy_gap).toBeLessThan(1e-3);
  expect(summary.prompt_logprob_gap).toBeLessThan(1e-3);
  expect(summary.computed_logprobs).toBe(5); // compute_logprobs: one per prompt token (the first is None)
  expect(summary.rl_iterations).toBe(3);
  // REST: both runs listed, the first's last training checkpoint, its checkpoints by kind, its session's runs.
  expect(summary.listed_runs).toEqual([summary.model_id, summary.resumed_model_id].sort());
  expect(summary.run_last_checkpoint).toBe(summary.state_path);
  expect(summary.checkpoint_types).toEqual(['sampler', 'sampler', 'sampler', 'sampler', 'training']); // 4 sampler saves: 1 + 3 RL
  expect(summary.session_runs).toEqual([summary.model_id]);

  // The ledger: every optimizer step applied once (18 SFT, 1 after the RL losses, 3 RL iterations; 1 on the resumed one), the
  // resumed session continuing from the saved optimizer state, and nothing left loaded after the clients closed.
  const l = await ledger(emulator);
  const mine = l.resources.filter((r) => r.owner === ownerOf(apiKey));
  expect(mine.map((r) => r.id).sort()).toEqual([summary.model_id, summary.resumed_model_id].sort());
  expect(mine.every((r) => r.dialect === 'tinker')).toBe(true);
  const steps = Object.fromEntries(
    l.sessions.filter((s) => mine.some((r) => r.id === s.resourceId)).map((s) => [s.resourceId, s.optimizerSteps]),
  );
  expect(steps).toEqual({ [summary.model_id]: 22, [summary.resumed_model_id]: 1 }); // 18 + 1 + 3 RL steps
  expect(l.active.filter((id) => mine.some((r) => r.id === id))).toEqual([]);
}, 300_000);

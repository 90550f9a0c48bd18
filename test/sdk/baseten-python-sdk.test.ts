import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ownerOf } from '../../emulator/engine';
import { BasetenProvider } from '../../providers/baseten/client';
import { startCaptureProxy, type CapturedRequest } from '../helpers/capture-proxy';
import { ledger, raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';
import { runPython, sdkVenv } from '../helpers/python-venv';

let emulator: RunningEmulator;
let python: string;
let tmp: string;

beforeAll(async () => {
  python = sdkVenv('baseten');
  emulator = await startTestEmulator();
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'roundhouse-baseten-sdk-'));
}, 600_000);

afterAll(async () => {
  await emulator?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the official baseten-loops SDK runs a train → save_state → save_weights_for_sampler → sample round against the emulator, set only by LOOPS_BASE_URL', async () => {
  const apiKey = testApiKey();
  const requestLog = path.join(tmp, 'sdk-requests.jsonl');
  // Only the documented settings: the control plane's URL and the key. Nothing in the environment points elsewhere.
  const run = await runPython(
    python,
    path.join(__dirname, 'baseten_loop.py'),
    {
      LOOPS_BASE_URL: emulator.url,
      BASETEN_API_KEY: apiKey,
      LOOPS_REQUEST_LOG: requestLog,
      LOOPS_TEAM: '',
      LOOPS_REUSE_FROM_RUN_ID: '',
      LOOPS_REUSE_FROM_SESSION_ID: '',
      NO_PROXY: '127.0.0.1,localhost',
      WANDB_MODE: 'disabled',
    },
    120_000,
  );
  const line = run.stdout.split('\n').find((l) => l.startsWith('SUMMARY '));
  if (run.code !== 0 || !line) throw new Error(`SDK script failed (${run.code}):\n${run.stdout.slice(-3000)}\n${run.stderr.slice(-3000)}`);
  const summary = JSON.parse(line.slice('SUMMARY '.length));

  expect(summary.status).toBe('ok');
  expect(summary.masked_are_null).toBe(true); // -100 positions come back as null logprobs
  expect(summary.trained_loss).toBeLessThan(summary.baseline_loss / 5);
  expect(summary.state_path).toBe(`bt://loops:${summary.run_id}/weights/round-state`);
  expect(summary.sampler_path).toBe(`bt://loops:${summary.run_id}/sampler_weights/round-sampler`);
  expect(summary.sampler_version).toBe(12); // 6 epochs × 2 batches
  expect(summary.correct).toBe(8); // greedy samples from the saved sampler weights give every label
  expect(summary.policy_versions).toEqual([12]);
  expect(summary.checkpoints).toEqual([
    ['round-sampler', 'sampler'],
    ['round-state', 'trainer'],
  ]);
  expect(summary.sampler_files).toEqual(['adapter_config.json', 'adapter_state.json']);
  expect(summary.resumed_step).toBe(12); // the state with its optimizer: the step continues
  expect(summary.resumed_next_step).toBe(13);
  expect(summary.cleanup).toEqual({ [summary.run_id]: 'INACTIVE', [summary.resumed_run_id]: 'INACTIVE' });

  // What the SDK saw on the wire: every trainer and sampler URL came from the control plane, all on the emulator,
  // with the Api-Key scheme; no answer was an error (408 is the long poll's "ask again").
  const records = fs
    .readFileSync(requestLog, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const requests = records.filter((r) => r.kind === 'request');
  const statuses = records.filter((r) => r.kind === 'response').map((r) => r.status as number);
  expect(requests.every((r) => r.url.startsWith(emulator.url))).toBe(true);
  expect(requests.every((r) => r.headers.authorization === 'Api-Key [REDACTED]')).toBe(true);
  expect(requests.some((r) => r.path.startsWith(`/baseten/trainers/${summary.run_id}/`))).toBe(true);
  expect(statuses.filter((s) => s !== 200 && s !== 202 && s !== 408)).toEqual([]);
  console.log(
    `baseten SDK round: ${summary.seconds}s in the script, ${requests.length} requests, ${statuses.filter((s) => s === 408).length} polls answered 408`,
  );

  // The ledger agrees: both runs (the trained one, and the one resumed from its state) stopped billing.
  const l = await ledger(emulator);
  const mine = l.resources.filter((r) => r.owner === ownerOf(apiKey));
  expect(mine.map((r) => r.id).sort()).toEqual([summary.run_id, summary.resumed_run_id].sort());
  expect(mine.find((r) => r.id === summary.run_id)).toMatchObject({ dialect: 'baseten', ownerTag: 'sdk-round' });
  expect(l.active.filter((id) => mine.some((r) => r.id === id))).toEqual([]);
  expect(
    l.sessions
      .filter((s) => mine.some((r) => r.id === s.resourceId))
      .map((s) => s.optimizerSteps)
      .sort((a, b) => a - b),
  ).toEqual([1, 12]);
}, 180_000);

/** The SDK's steps that reach each plane once: a session, capabilities, a trainer (health, init), a forward, sampler weights and one sample. */
const AUTH_PROBE = `
from baseten.loops import Datum, ModelInput, SamplingParams, ServiceClient, TensorData
service = ServiceClient()
service.get_server_capabilities()
training = service.create_lora_training_client("roundhouse/tiny-chat", rank=4, seed=1, max_seq_len=64, ready_timeout=60, name="auth-probe")
datum = Datum(model_input=ModelInput.from_ints([1, 2, 3, 4]),
              loss_fn_inputs={"target_tokens": TensorData(data=[2, 3, 4, -100], dtype="int64", shape=[4])})
training.forward([datum], loss_fn="cross_entropy").result()
weights = training.save_weights_for_sampler("auth-sampler").result()
sampler = training.create_sampling_client(weights.path)
sampler.sample(ModelInput.from_ints([1, 2, 3]), num_samples=1, sampling_params=SamplingParams(max_tokens=2, temperature=0.0, seed=0))
print("RUN " + training.run_id, flush=True)
sampler.close()
training.close()
`;

/** Each plane's distinct Authorization values, from requests of one client (told by its User-Agent). */
function authByPlane(requests: CapturedRequest[], userAgent: RegExp): Record<string, string[]> {
  const out: Record<string, Set<string>> = {};
  for (const r of requests) {
    if (!userAgent.test(String(r.headers['user-agent']))) continue;
    const where = r.path.startsWith('/v1/')
      ? 'control'
      : r.path.startsWith('/baseten/trainers/')
        ? 'trainer'
        : r.path.startsWith('/baseten/samplers/')
          ? 'sampler'
          : r.path;
    (out[where] ??= new Set()).add(String(r.headers.authorization));
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v]]));
}

test("the SDK's Authorization header, captured on the wire on every plane, is the one our client sends: `Api-Key <key>`", async () => {
  const apiKey = testApiKey();
  const proxy = await startCaptureProxy(emulator.url);
  const runs: string[] = [];
  try {
    const script = path.join(tmp, 'auth_probe.py');
    fs.writeFileSync(script, AUTH_PROBE);
    const sdk = await runPython(
      python,
      script,
      { LOOPS_BASE_URL: proxy.url, BASETEN_API_KEY: apiKey, LOOPS_TEAM: '', NO_PROXY: '127.0.0.1,localhost', WANDB_MODE: 'disabled' },
      120_000,
    );
    const line = sdk.stdout.split('\n').find((l) => l.startsWith('RUN '));
    if (line) runs.push(line.slice('RUN '.length).trim());
    if (sdk.code !== 0 || !line) throw new Error(`SDK probe failed (${sdk.code}):\n${sdk.stdout.slice(-2000)}\n${sdk.stderr.slice(-3000)}`);

    // Ours, through the same proxy, with the same key: the same planes.
    const provider = new BasetenProvider({ baseUrl: proxy.url, apiKey, pollIntervalMs: 5, maxPollIntervalMs: 50 });
    try {
      await provider.supportedModels();
      const run = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'auth-probe', generatorReplicas: 0 });
      runs.push(run.id);
      await provider.waitReady(run.id, { pollIntervalMs: 10 });
      const session = await provider.openSession({ resourceId: run.id, loraRank: 4, seed: 1 });
      await provider.awaitOperation(
        await provider.submitForwardBackward(session.id, 'auth/fb', [
          { modelInput: [1, 2, 3], targetTokens: [2, 3, 4], weights: [0, 1, 1] },
        ]),
      );
      await provider.awaitOperation(await provider.submitSample(session.id, 'auth/sample', [[1, 2, 3]], { maxTokens: 2, temperature: 0 }));
    } finally {
      await provider.close();
    }

    const expected = { control: [`Api-Key ${apiKey}`], trainer: [`Api-Key ${apiKey}`], sampler: [`Api-Key ${apiKey}`] };
    const theirs = authByPlane(proxy.requests, /^baseten-loops\/0\.32\.0$/);
    const ours = authByPlane(proxy.requests, /^roundhouse-baseten$/);
    expect(theirs).toEqual(expected);
    expect(ours).toEqual(theirs);
  } finally {
    await proxy.close();
    for (const id of runs) await raw(emulator, 'POST', `/v1/loops/runs/${id}/deactivate`, { apiKey, scheme: 'Api-Key' });
  }
}, 180_000);

import { raw, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

// Two of Together's sampling caveats, as issue #44 quotes the guide: a seed on a generator of more than one inference
// engine fails with an internal error; a stop string on a model without stop-string support fails as invalid input.
let emulator: RunningEmulator;
const apiKey = 'sampling-caveats-key';

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  await emulator.close();
});

/** A session on a fresh resource of `model` with `replicas` generator replicas: its operations path. */
async function sessionOn(model: string, replicas: number): Promise<string> {
  const resource = await raw(emulator, 'POST', '/v1/rl/model-resources', {
    apiKey,
    body: { base_model: model, compute_config: { num_generator_replicas: replicas } },
  });
  expect(resource.status).toBe(200);
  const session = await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey, body: { model_resources_id: resource.json.id } });
  expect(session.status).toBe(200);
  return `/v1/rl/training-sessions/${session.json.id}/operations`;
}

/** Submits a sample and polls it until it settles: the operation as the service renders it. */
async function settledSample(ops: string, key: string, samplingParams: Record<string, unknown>): Promise<any> {
  const submitted = await raw(emulator, 'POST', `${ops}/sample`, {
    apiKey,
    idempotencyKey: key,
    body: { model_inputs: [{ chunks: [{ encoded_text: { tokens: ['5', '6', '7'] } }] }], num_samples: 2, sampling_params: samplingParams },
  });
  expect(submitted.status).toBe(200);
  for (let i = 0; i < 200; i++) {
    const op = await raw(emulator, 'GET', `${ops}/sample/${submitted.json.id}`, { apiKey });
    if (op.json.status !== 'TRAINING_OPERATION_STATUS_PENDING' && op.json.status !== 'TRAINING_OPERATION_STATUS_RUNNING') return op.json;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`sample ${submitted.json.id} did not settle`);
}

describe('a sampling seed on a generator of more than one replica', () => {
  test('fails the operation with INTERNAL_ERROR saying seed is unsupported with several inference engines', async () => {
    const ops = await sessionOn('roundhouse/tiny-chat', 2);
    const op = await settledSample(ops, 'seeded-2', { max_tokens: 4, temperature: 1, seed: '42' });
    expect(op.status).toBe('TRAINING_OPERATION_STATUS_FAILED');
    expect(op.error).toEqual({
      code: 'TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR',
      message: expect.stringMatching(/seed is not supported when the generator uses more than one inference engine/),
    });
  });

  test('the same sample without a seed completes on 2 replicas, and with one on 1 replica', async () => {
    const unseeded = await settledSample(await sessionOn('roundhouse/tiny-chat', 2), 'unseeded-2', { max_tokens: 4, temperature: 1 });
    expect(unseeded.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
    expect(unseeded.output.results[0].sequences).toHaveLength(2);
    const seeded = await settledSample(await sessionOn('roundhouse/tiny-chat', 1), 'seeded-1', {
      max_tokens: 4,
      temperature: 1,
      seed: '42',
    });
    expect(seeded.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
  });
});

describe('stop strings, by model', () => {
  test('the supported-models listing says which models take stop strings, and has models of both kinds', async () => {
    const listing = await raw(emulator, 'GET', '/v1/rl/supported-models', { apiKey });
    const support = Object.fromEntries(
      (listing.json.data as { base_model: string; supports_stop_strings: boolean }[]).map((m) => [m.base_model, m.supports_stop_strings]),
    );
    expect(support['roundhouse/tiny-chat']).toBe(true);
    expect(support['Qwen/Qwen3.5-2B']).toBe(false);
  });

  test('a sample with stop on a model without stop-string support is refused with 400 INVALID_INPUT', async () => {
    const ops = await sessionOn('Qwen/Qwen3.5-2B', 1);
    const body = {
      model_inputs: [{ chunks: [{ encoded_text: { tokens: ['5', '6', '7'] } }] }],
      sampling_params: { max_tokens: 4, stop: ['\n'] },
    };
    const refused = await raw(emulator, 'POST', `${ops}/sample`, { apiKey, idempotencyKey: 'stop-unsupported', body });
    expect(refused.status).toBe(400);
    expect(refused.json).toEqual({
      error: { code: 'INVALID_INPUT', message: expect.stringMatching(/sampling_params\.stop: this model does not support stop strings/) },
    });
    const op = await settledSample(ops, 'no-stop', { max_tokens: 4 });
    expect(op.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
  });

  test('a model with stop-string support takes them', async () => {
    const op = await settledSample(await sessionOn('roundhouse/tiny-chat', 1), 'stop-supported', { max_tokens: 4, stop: ['e'] });
    expect(op.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
  });
});

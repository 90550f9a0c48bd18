import { raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';

/**
 * What a Together resource's shape allows (issue #44, item 4), over HTTP: a trainer-only resource
 * (`num_generator_replicas: 0`) has no generator to sample on, and a forward-backward takes at most the model's
 * `max_batch_size` sequences.
 */

const TINY = 'roundhouse/tiny-chat';
let emulator: RunningEmulator;
let apiKey: string;

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(() => {
  apiKey = testApiKey();
});

const rl = (method: 'GET' | 'POST', path: string, body?: object, key?: string) =>
  raw(emulator, method, `/v1/rl${path}`, { apiKey, body, idempotencyKey: key });

async function session(generatorReplicas: number): Promise<string> {
  const resource = await rl('POST', '/model-resources', {
    base_model: TINY,
    compute_config: { num_generator_replicas: generatorReplicas },
  });
  expect(resource.status).toBe(200);
  expect(resource.json.compute_config.num_generator_replicas).toBe(generatorReplicas);
  const created = await rl('POST', '/training-sessions', { model_resources_id: resource.json.id, lora_config: { rank: 8 } });
  expect(created.status).toBe(200);
  return created.json.id as string;
}

const sequence = (tokens: number[]) => ({
  model_input: { chunks: [{ encoded_text: { tokens: tokens.slice(0, -1) } }] },
  loss_fn_inputs: {
    target_tokens: { data: tokens.slice(1), dtype: 'int64' },
    weights: { data: tokens.slice(1).map(() => 1), dtype: 'float32' },
  },
});

const crossEntropy = (n: number) => ({
  loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' },
  samples: Array.from({ length: n }, (_, i) => sequence([1, 5 + (i % 7), 6, 7])),
});

const maxBatchSize = async (): Promise<number> => {
  const models = (await rl('GET', '/supported-models')).json.data as any[];
  return models.find((m) => m.base_model === TINY).compute_configs[0].trainer_config.lora.max_batch_size as number;
};

test('a sample on a trainer-only resource (num_generator_replicas 0) is refused: 400 INVALID_INPUT, no generator', async () => {
  const s = await session(0);
  const res = await rl(
    'POST',
    `/training-sessions/${s}/operations/sample`,
    { model_inputs: [{ chunks: [{ encoded_text: { tokens: [1, 5, 6] } }] }], num_samples: 1, sampling_params: { max_tokens: 4 } },
    'sample-1',
  );
  expect(res.status).toBe(400);
  expect(res.json.error.code).toBe('INVALID_INPUT');
  expect(res.json.error.message).toMatch(/no generator.*num_generator_replicas 0/);
  // Training on it is what it is for.
  const fb = await rl('POST', `/training-sessions/${s}/operations/forward-backward`, crossEntropy(2), 'fb-1');
  expect(fb.status).toBe(200);
});

test('a forward-backward over the published max_batch_size is refused naming the limit; one at the limit is accepted', async () => {
  const limit = await maxBatchSize();
  expect(limit).toBe(256);
  const s = await session(1);
  const over = await rl('POST', `/training-sessions/${s}/operations/forward-backward`, crossEntropy(limit + 1), 'fb-over');
  expect(over.status).toBe(400);
  expect(over.json.error.code).toBe('INVALID_INPUT');
  expect(over.json.error.message).toBe(
    `samples has ${limit + 1} sequences; ${TINY} accepts at most ${limit} per forward-backward step (trainer_config.lora.max_batch_size)`,
  );
  const forwardOnly = await rl(
    'POST',
    `/training-sessions/${s}/operations/forward-backward`,
    { ...crossEntropy(limit + 1), forward_only: true },
    'fwd-over',
  );
  expect(forwardOnly.status).toBe(400);
  const custom = await rl(
    'POST',
    `/training-sessions/${s}/operations/custom-forward-backward`,
    {
      samples: crossEntropy(limit + 1).samples,
      gradients: Array.from({ length: limit + 1 }, () => ({ data: [0, 0, 0], dtype: 'float32' })),
    },
    'custom-over',
  );
  expect(custom.status).toBe(400);
  expect(custom.json.error.message).toMatch(/accepts at most 256 per forward-backward step/);
  const atLimit = await rl('POST', `/training-sessions/${s}/operations/forward-backward`, crossEntropy(limit), 'fb-limit');
  expect(atLimit.status).toBe(200);
});

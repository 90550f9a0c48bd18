import { raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';

// Together: "A resource created with lora_enabled=True accepts up to five concurrent sessions by default, and fewer for
// some models. A full-weight resource (lora_enabled=False) accepts one. … Creating a session beyond the cap fails with
// HTTP 429." (docs.together.ai post-training/multi-lora). The emulator's cap is per model (emulator/models.ts).
let emulator: RunningEmulator;
const STOP_DELAY_MS = 300;

beforeAll(async () => {
  // Sessions need no learner here: the cap is about how many there are, not what they compute.
  emulator = await startTestEmulator({ compute: 'none', stopDelayMs: STOP_DELAY_MS });
});

afterAll(async () => {
  await emulator.close();
});

async function readyResource(apiKey: string, body: Record<string, unknown>): Promise<string> {
  const res = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey, body });
  expect(res.status).toBe(200);
  return res.json.id;
}

const openSession = (apiKey: string, resourceId: string) =>
  raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey, body: { model_resources_id: resourceId } });

describe('concurrent sessions per Together resource', () => {
  test('the supported-models listing publishes each model’s cap as adapter_capacity: 5 by default, fewer for gpt-oss-20b', async () => {
    const res = await raw(emulator, 'GET', '/v1/rl/supported-models', { apiKey: testApiKey() });
    const capacity = Object.fromEntries(
      res.json.data.map((m: { base_model: string; adapter_capacity: number }) => [m.base_model, m.adapter_capacity]),
    );
    expect(capacity['roundhouse/tiny-chat']).toBe(5);
    expect(capacity['Qwen/Qwen3.5-2B']).toBe(5);
    expect(capacity['openai/gpt-oss-20b']).toBe(2);
  });

  test('a session past the model’s cap answers 429 with a Retry-After and a Together error body naming the cap', async () => {
    const apiKey = testApiKey();
    const resourceId = await readyResource(apiKey, { base_model: 'openai/gpt-oss-20b' });
    for (let i = 0; i < 2; i++) expect((await openSession(apiKey, resourceId)).status).toBe(200);
    const refused = await openSession(apiKey, resourceId);
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers['retry-after-ms']).toBe('1000');
    expect(refused.json).toEqual({
      error: {
        code: 'RESOURCE_EXHAUSTED',
        message: expect.stringMatching(
          /already has 2 active training sessions; a LoRA resource of openai\/gpt-oss-20b accepts at most 2 concurrent sessions/,
        ),
      },
    });
    const listed = await raw(emulator, 'GET', `/v1/rl/training-sessions?model_resources_id=${resourceId}`, { apiKey });
    expect(listed.json.data).toHaveLength(2); // the refused create made nothing
  });

  test('a stopping session holds its slot until it has stopped; then a new session gets in', async () => {
    const apiKey = testApiKey();
    const resourceId = await readyResource(apiKey, { base_model: 'openai/gpt-oss-20b' });
    const first = await openSession(apiKey, resourceId);
    expect((await openSession(apiKey, resourceId)).status).toBe(200);
    const stopping = await raw(emulator, 'POST', `/v1/rl/training-sessions/${first.json.id}/stop`, { apiKey });
    expect(stopping.json.status).toBe('TRAINING_SESSION_STATUS_STOPPING');
    expect((await openSession(apiKey, resourceId)).status).toBe(429);
    await new Promise((resolve) => setTimeout(resolve, STOP_DELAY_MS + 50));
    const admitted = await openSession(apiKey, resourceId);
    expect(admitted.status).toBe(200);
    expect(admitted.json.status).toBe('TRAINING_SESSION_STATUS_RUNNING');
  });

  test('a full-weight resource (lora_enabled false) accepts one session', async () => {
    const apiKey = testApiKey();
    const resourceId = await readyResource(apiKey, { base_model: 'roundhouse/tiny-chat', lora_enabled: false });
    expect((await openSession(apiKey, resourceId)).status).toBe(200);
    const refused = await openSession(apiKey, resourceId);
    expect(refused.status).toBe(429);
    expect(refused.json.error.message).toMatch(/a full-weight resource accepts at most 1 concurrent session/);
  });
});

import { request } from 'undici';
import { BasetenProvider } from '../../providers/baseten/client';
import { startCaptureProxy, type CaptureProxy } from '../helpers/capture-proxy';
import { basetenProvider, raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';

/**
 * How a Baseten Loops caller authenticates (providers/baseten/WIRE.md §1.3): our client sends the header the official
 * `baseten-loops` 0.32.0 SDK sends, `Authorization: Api-Key <key>`, on every plane; the emulator accepts what the API
 * documents (`Api-Key` and `Bearer`) and refuses anything else with a 401. The SDK's own header, captured on the wire,
 * is compared with ours in test/sdk/baseten-python-sdk.test.ts.
 */

const MODEL = 'roundhouse/tiny-chat';
let emulator: RunningEmulator;
let proxy: CaptureProxy;

beforeAll(async () => {
  emulator = await startTestEmulator({ basetenPollHoldMs: 1_000 });
  proxy = await startCaptureProxy(emulator.url);
});

afterAll(async () => {
  await proxy?.close();
  await emulator?.close();
});

/** The plane a request went to, from its path on the emulator. */
function plane(path: string): 'control' | 'trainer' | 'sampler' | 'other' {
  if (path.startsWith('/v1/')) return 'control';
  if (path.startsWith('/baseten/trainers/')) return 'trainer';
  if (path.startsWith('/baseten/samplers/')) return 'sampler';
  return 'other';
}

test('our Baseten client sends `Authorization: Api-Key <key>` (what the SDK sends) on the control plane, the trainer and the sampler', async () => {
  const apiKey = testApiKey();
  const provider = new BasetenProvider({
    baseUrl: proxy.url,
    apiKey,
    pollIntervalMs: 5,
    maxPollIntervalMs: 50,
    initialRetryDelayMs: 5,
    maxRetryDelayMs: 50,
  });
  const from = proxy.requests.length;
  try {
    await provider.supportedModels();
    const run = await provider.provision({ model: MODEL, ownerTag: 'auth-probe', generatorReplicas: 0 });
    await provider.waitReady(run.id, { pollIntervalMs: 10 });
    const session = await provider.openSession({ resourceId: run.id, loraRank: 4, seed: 1 });
    await provider.awaitOperation(
      await provider.submitForwardBackward(session.id, 'auth/fb', [{ modelInput: [1, 2, 3], targetTokens: [2, 3, 4], weights: [0, 1, 1] }]),
    );
    await provider.awaitOperation(await provider.submitSample(session.id, 'auth/sample', [[1, 2, 3]], { maxTokens: 2, temperature: 0 }));
    await provider.deactivate(run.id);
  } finally {
    await provider.close();
  }

  const mine = proxy.requests.slice(from);
  const byPlane = (p: string) => mine.filter((r) => plane(r.path) === p);
  for (const p of ['control', 'trainer', 'sampler']) expect(byPlane(p).length).toBeGreaterThan(0);
  // Every request, on every plane, carries the key in the SDK's scheme, and nothing else holds it.
  expect([...new Set(mine.map((r) => r.headers.authorization))]).toEqual([`Api-Key ${apiKey}`]);
  expect(mine.filter((r) => r.headers['x-api-key'] !== undefined)).toEqual([]);
});

describe('the emulator takes the API key as Baseten documents it', () => {
  let apiKey: string;
  let trainerHealth: string;
  let samplerModels: string;

  beforeAll(async () => {
    apiKey = testApiKey();
    const provider = basetenProvider(emulator, apiKey);
    const run = await provider.provision({ model: MODEL, ownerTag: 'auth-forms', generatorReplicas: 0 });
    await provider.waitReady(run.id, { pollIntervalMs: 10 });
    const session = await provider.openSession({ resourceId: run.id, loraRank: 4 });
    await provider.awaitOperation(await provider.submitSample(session.id, 'auth/sampler', [[1, 2]], { maxTokens: 1, temperature: 0 }));
    await provider.close();
    const { json } = await raw(emulator, 'GET', `/v1/loops/runs/${run.id}`, { apiKey, scheme: 'Api-Key' });
    trainerHealth = `${json.run.base_url as string}/health`;
    samplerModels = `${json.run.sampler.base_url as string}/v1/models`;
  });

  const get = async (url: string, headers: Record<string, string>) => {
    const res = await request(url, { method: 'GET', headers });
    const text = await res.body.text();
    return { status: res.statusCode, json: text ? JSON.parse(text) : undefined };
  };
  const urls = () => ({ control: `${emulator.url}/v1/loops/capabilities`, trainer: trainerHealth, sampler: samplerModels });

  test.each([
    ['Api-Key (the SDK; docs: "also accepted")', (k: string) => `Api-Key ${k}`],
    ['Bearer (the docs and OpenAPI)', (k: string) => `Bearer ${k}`],
    ['a scheme in another case (schemes are case-insensitive, RFC 9110 §11.1)', (k: string) => `api-key ${k}`],
  ])('%s is accepted on the control plane, the trainer and the sampler', async (_name, header) => {
    for (const [where, url] of Object.entries(urls())) {
      const res = await get(url, { authorization: header(apiKey) });
      expect({ where, status: res.status }).toEqual({ where, status: 200 });
    }
  });

  test.each([
    ['no Authorization header', () => ({})],
    ['the key alone, with no scheme', (k: string) => ({ authorization: k })],
    ['another scheme (Basic)', (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` })],
    ['another scheme (Token)', (k: string) => ({ authorization: `Token ${k}` })],
    ['a misspelled scheme (ApiKey)', (k: string) => ({ authorization: `ApiKey ${k}` })],
    ['a scheme with no key', () => ({ authorization: 'Api-Key' })],
    ['the key in X-Api-Key (Tinker’s header)', (k: string) => ({ 'x-api-key': k })],
  ])('%s is refused with 401 on the control plane, the trainer and the sampler', async (_name, headers) => {
    for (const [where, url] of Object.entries(urls())) {
      const res = await get(url, headers(apiKey) as Record<string, string>);
      expect({ where, status: res.status }).toEqual({ where, status: 401 });
      expect(res.json).toEqual({
        error: { code: 'UNAUTHENTICATED', message: expect.stringMatching(/Api-Key.*Bearer/) },
        detail: expect.stringMatching(/Authorization/),
      });
    }
  });
});

import { request } from 'undici';
import { ledger, startTestEmulator, testTinkerKey, type RunningEmulator } from '../helpers/emulator';
import { TinkerProvider } from '../../providers/tinker/client';
import type { Datum } from '../../providers/types';

// Tinker's JWT mode (WIRE.md §1): when `client/config` says `pjwt_auth_enabled`, the key is exchanged at `auth/token`
// for a JWT, which every other request carries, refreshed before it runs out. The emulator in that mode refuses keys
// on every other route, so a round's calls succeed only with the JWT.

const MODEL = 'roundhouse/tiny-chat';
const datum: Datum = { modelInput: [10, 11, 12, 40], targetTokens: [11, 12, 40, 41], weights: [0, 0, 1, 1] };
let emulator: RunningEmulator;

beforeAll(async () => {
  // 62 s: the token is within a minute of its expiry 2 s after it is issued, when the client refreshes it.
  emulator = await startTestEmulator({ tinkerJwtLifetimeSeconds: 62 });
});

afterAll(async () => {
  await emulator.close();
});

test('in JWT mode the provider trains with a JWT it exchanged for its key, and refreshes it before it runs out', async () => {
  const key = testTinkerKey();
  // The service takes no raw key outside client/config and auth/token.
  const refused = await request(`${emulator.url}/api/v1/create_session`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ tags: [], user_metadata: {}, sdk_version: '0.38.0', type: 'create_session' }),
  });
  expect(refused.statusCode).toBe(401);
  expect(refused.headers['www-authenticate']).toMatch(/invalid_token/);
  await refused.body.text();

  // The JWTs the provider was issued, as it reports them to be masked in logs (its public onSecret hook).
  const issued: string[] = [];
  const tinker = new TinkerProvider({ baseUrl: emulator.url, apiKey: key, heartbeatMs: 60_000, onSecret: (v) => issued.push(v) });
  const token = () => issued.at(-1);
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'jwt' });
  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8 });
  await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'jwt/fb/1', [datum]));
  expect(await tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'jwt/opt/1', { learningRate: 0.01 }))).toEqual({ step: 1 });
  const first = token();
  expect(first).toMatch(/^eyJ/);

  await new Promise((r) => setTimeout(r, 2_500));
  await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'jwt/fb/2', [datum]));
  expect(await tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'jwt/opt/2', { learningRate: 0.01 }))).toEqual({ step: 2 });
  expect(token()).toMatch(/^eyJ/);
  expect(token()).not.toBe(first); // refreshed on demand, within a minute of its expiry
  // At least that refresh (a slow machine may cross the refresh point again between two requests), each a new JWT.
  expect(issued.length).toBeGreaterThanOrEqual(2);
  expect(new Set(issued).size).toBe(issued.length);

  // The same owner as the key: what the JWT created is the key's.
  expect((await ledger(emulator)).sessions.find((s) => s.id === session.id)).toMatchObject({ optimizerSteps: 2 });
  await tinker.deactivate(resource.id);
  expect((await ledger(emulator)).active).not.toContain(session.id);
  await tinker.close();
});

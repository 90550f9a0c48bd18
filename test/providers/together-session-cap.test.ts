import { ProviderError } from '../../providers/errors';
import type { TogetherProvider } from '../../providers/together/client';
import { startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

// A session create past the resource's cap answers 429 with Retry-After: 1 s (emulator/engine/sessions.ts). The provider
// retries it as Together's SDK session client does (7 times, honouring Retry-After), then fails with an error that
// names the cap, which no retry of the activity can lift.
let emulator: RunningEmulator;
const MODEL = 'openai/gpt-oss-20b'; // its LoRA resources accept 2 concurrent sessions

beforeAll(async () => {
  emulator = await startTestEmulator({ compute: 'none' });
});

afterAll(async () => {
  await emulator.close();
});

async function resourceWithSessions(provider: TogetherProvider, count: number): Promise<{ resourceId: string; sessionIds: string[] }> {
  const resource = await provider.provision({ model: MODEL, ownerTag: 'test-session-cap' });
  const sessionIds: string[] = [];
  for (let i = 0; i < count; i++)
    sessionIds.push((await provider.openSession({ resourceId: resource.id, baseModel: MODEL, loraRank: 8 })).id);
  return { resourceId: resource.id, sessionIds };
}

test('a session refused past the cap is retried 7 times honouring Retry-After, then fails as SESSION_CAP_REACHED naming the cap and its holders', async () => {
  const provider = togetherProvider(emulator);
  try {
    const { resourceId, sessionIds } = await resourceWithSessions(provider, 2);
    const startedAt = Date.now();
    const err = await provider.openSession({ resourceId, baseModel: MODEL, loraRank: 8 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    const elapsedMs = Date.now() - startedAt;
    expect(err).toBeInstanceOf(ProviderError);
    const refusal = err as ProviderError;
    expect(refusal).toMatchObject({ code: 'SESSION_CAP_REACHED', errorClass: 'non-retryable', status: 429 });
    expect(refusal.message).toContain(`model resource ${resourceId} refused a new training session with HTTP 429`);
    expect(refusal.message).toContain(`${MODEL} accepts 2 concurrent sessions per LoRA resource; 2 active on it: `);
    for (const id of sessionIds) expect(refusal.message).toContain(id);
    // Seven waits of the server's 1 s (the client's own backoff here is 5-50 ms), and then no more.
    expect(elapsedMs).toBeGreaterThanOrEqual(7_000);
    expect(elapsedMs).toBeLessThan(12_000);
    expect(await provider.listSessions(resourceId)).toHaveLength(2);
  } finally {
    await provider.close();
  }
}, 30_000);

test('a slot freed while the create waits out a Retry-After lets the session in', async () => {
  const provider = togetherProvider(emulator);
  try {
    const { resourceId, sessionIds } = await resourceWithSessions(provider, 2);
    const startedAt = Date.now();
    const third = provider.openSession({ resourceId, baseModel: MODEL, loraRank: 8 });
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await provider.closeSession(sessionIds[0]!);
    const session = await third;
    expect(session.state).toBe('running');
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1_500);
    const running = (await provider.listSessions(resourceId)).filter((s) => s.state === 'running').map((s) => s.id);
    expect(running.sort()).toEqual([sessionIds[1]!, session.id].sort());
  } finally {
    await provider.close();
  }
}, 30_000);

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SamplerGateway, type EpisodeSampler, type TurnRecord } from '../../activities/gateway';
import { tokenizerFor } from '../../config/io/tokenizer';
import type { TogetherProvider } from '../../providers/together/client';
import { ledger, startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

// The sampler gateway over real HTTP on loopback, backed by the emulator's Together sampler: each episode's token is
// good for its own URL only, and only until the episode ends; a request made again is answered from its record.

let emulator: RunningEmulator;
let provider: TogetherProvider;
let gateway: SamplerGateway;
let sessionId: string;
let resourceId: string;

beforeAll(async () => {
  emulator = await startTestEmulator();
  provider = togetherProvider(emulator);
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'test-gateway' });
  resourceId = resource.id;
  await provider.waitReady(resource.id, { pollIntervalMs: 20 });
  sessionId = (await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7 })).id;
  gateway = await SamplerGateway.start();
});

afterAll(async () => {
  await gateway?.close();
  await provider?.deactivate(resourceId);
  await provider?.close();
  await emulator?.close();
});

function sampler(recordsDir: string): EpisodeSampler {
  return {
    tokenizer: tokenizerFor('roundhouse/tiny-chat', undefined),
    recordsDir,
    defaults: { maxTokens: 4, temperature: 1 },
    maxTurns: 3,
    model: 'roundhouse/tiny-chat',
    counts: { sampled: 0, replayed: 0 },
    async sample(promptTokens, params, n, key) {
      const handle = await provider.submitSample(sessionId, `${path.basename(recordsDir)}/${key}`, [promptTokens], params, {
        numSamples: n,
      });
      const [result] = await provider.awaitOperation(handle);
      return result!;
    },
  };
}

async function chat(url: string, token: string | undefined, messages: { role: string; content: string }[]) {
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ model: 'roundhouse/tiny-chat', messages, logprobs: true }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const hello = [{ role: 'user', content: 'Say a number.' }];

test("an episode's token works on its own URL only, until the episode ends; what it sampled is recorded before the answer", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-'));
  const a = sampler(path.join(dir, 'round-a'));
  const roundA = gateway.open({ round: 'campaign-a/r1', step: 0, episode: 'p0-c0' }, a);
  const roundB = gateway.open({ round: 'campaign-b/r1', step: 0, episode: 'p0-c0' }, sampler(path.join(dir, 'round-b')));

  const answer = await chat(roundA.url, roundA.token, hello);
  expect(answer.status).toBe(200);
  const choice = answer.body.choices[0];
  const record = JSON.parse(fs.readFileSync(path.join(dir, 'round-a', `${answer.body.id}.json`), 'utf8')) as TurnRecord;
  expect(answer.body.prompt_token_ids).toEqual(record.promptTokens);
  expect(choice.token_ids).toEqual(record.choices[0]!.tokens);
  expect(choice.logprobs.content.map((c: { logprob: number }) => c.logprob)).toEqual(record.choices[0]!.logprobs);
  expect(record.turn).toBe(0);

  // Another round's token, no token, a made-up episode: refused, and nothing sampled for them.
  const drawn = (await ledger(emulator)).sessions.find((s) => s.id === sessionId)!.sampling.operations;
  expect(await chat(roundA.url, roundB.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'invalid_token' } } });
  expect(await chat(roundB.url, roundA.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'invalid_token' } } });
  expect(await chat(roundA.url, undefined, hello)).toMatchObject({ status: 401, body: { error: { code: 'invalid_token' } } });
  const madeUp = roundA.url.replace(/episodes\/[0-9a-f]{24}/, `episodes/${'0'.repeat(24)}`);
  expect(await chat(madeUp, roundA.token, hello)).toMatchObject({ status: 404, body: { error: { code: 'unknown_episode' } } });

  // The same request again is answered from its record; a fourth turn is past maxTurns.
  const again = await chat(roundA.url, roundA.token, hello);
  expect(again.body.id).toBe(answer.body.id);
  expect(again.body.choices[0].token_ids).toEqual(choice.token_ids);
  expect(a.counts).toEqual({ sampled: 1, replayed: 1 });
  const long = [
    ...hello,
    ...[1, 2, 3].flatMap(() => [
      { role: 'assistant', content: '7' },
      { role: 'user', content: 'Another?' },
    ]),
  ];
  expect(await chat(roundA.url, roundA.token, long)).toMatchObject({ status: 400, body: { error: { code: 'max_turns' } } });
  expect((await ledger(emulator)).sessions.find((s) => s.id === sessionId)!.sampling.operations).toBe(drawn);

  // Ended: its token is refused from then on, while the other round's episode goes on.
  gateway.end(roundA.id);
  expect(await chat(roundA.url, roundA.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'episode_ended' } } });
  expect((await chat(roundB.url, roundB.token, hello)).status).toBe(200);
  gateway.end(roundB.id);
});

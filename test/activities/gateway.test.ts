import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SamplerGateway, writeGatewayFile, type EpisodeSampler, type TurnRecord } from '../../activities/gateway';
import { tokenizerFor } from '../../config/io/tokenizer';
import type { TogetherProvider } from '../../providers/together/client';
import { ledger, setFaults, startTestEmulator, testApiKey, togetherProvider, type RunningEmulator } from '../helpers/emulator';

// The sampler gateway over real HTTP on loopback, backed by the emulator's Together sampler: each episode's token is
// good for its own URL only, and only until the episode ends; a request made again is answered from its record; the
// spec bounds what a request may ask; a provider failure reaches the episode without the provider's text.

let emulator: RunningEmulator;
let apiKey: string;
let provider: TogetherProvider;
let gateway: SamplerGateway;
let sessionId: string;
let resourceId: string;

beforeAll(async () => {
  emulator = await startTestEmulator();
  apiKey = testApiKey();
  provider = togetherProvider(emulator, apiKey);
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

function sampler(recordsDir: string, options: { maxSeqLen?: number; logged?: Record<string, unknown>[] } = {}): EpisodeSampler {
  return {
    tokenizer: tokenizerFor('roundhouse/tiny-chat', undefined),
    recordsDir,
    defaults: { maxTokens: 4, temperature: 1 },
    maxTurns: 3,
    ...(options.maxSeqLen !== undefined ? { maxSeqLen: options.maxSeqLen } : {}),
    model: 'roundhouse/tiny-chat',
    counts: { sampled: 0, replayed: 0 },
    log: (message, fields) => options.logged?.push({ message, ...fields }),
    async sample(promptTokens, params, n, key) {
      const handle = await provider.submitSample(sessionId, `${path.basename(recordsDir)}/${key}`, [promptTokens], params, {
        numSamples: n,
      });
      const [result] = await provider.awaitOperation(handle);
      return result!;
    },
  };
}

async function chat(
  url: string,
  token: string | undefined,
  messages: { role: string; content: string }[],
  extra: Record<string, unknown> = {},
) {
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ model: 'roundhouse/tiny-chat', messages, logprobs: true, ...extra }),
  });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as Record<string, any>, text };
}

const drawnBy = async (id: string) => (await ledger(emulator)).sessions.find((s) => s.id === id)!.sampling.operations;

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

  // The same request again is answered from its record.
  const again = await chat(roundA.url, roundA.token, hello);
  expect(again.body.id).toBe(answer.body.id);
  expect(again.body.choices[0].token_ids).toEqual(choice.token_ids);
  expect(a.counts).toEqual({ sampled: 1, replayed: 1 });
  expect(await drawnBy(sessionId)).toBe(drawn);

  // Ended: its token is refused from then on, while the other round's episode goes on.
  gateway.end(roundA.id);
  expect(await chat(roundA.url, roundA.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'episode_ended' } } });
  expect((await chat(roundB.url, roundB.token, hello)).status).toBe(200);
  gateway.end(roundB.id);
});

test('maxTurns counts the completions served to the episode, not the assistant messages its request carries', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-'));
  const episode = gateway.open({ round: 'campaign-turns/r1', step: 0, episode: 'p0-c0' }, sampler(dir));
  // Three requests that each look like a first turn (no assistant message): three completions, the maxTurns of 3.
  const asks = ['Say a number.', 'Say another number.', 'And one more.'];
  for (const content of asks) expect((await chat(episode.url, episode.token, [{ role: 'user', content }])).status).toBe(200);
  const drawn = await drawnBy(sessionId);
  const fourth = await chat(episode.url, episode.token, [{ role: 'user', content: 'A fourth?' }]);
  expect(fourth).toMatchObject({ status: 400, body: { error: { code: 'max_turns' } } });
  expect(fourth.body.error.message).toMatch(/completion 4 is past round\.grpo\.environment\.maxTurns \(3\)/);
  // The episode retried on the same token replays its three completions (not new ones), and is again held at three.
  for (const content of asks) expect((await chat(episode.url, episode.token, [{ role: 'user', content }])).status).toBe(200);
  expect((await chat(episode.url, episode.token, [{ role: 'user', content: 'A fourth?' }])).status).toBe(400);
  expect(await drawnBy(sessionId)).toBe(drawn);
  gateway.end(episode.id);
});

test("max_tokens and n above the spec's caps are refused with a 400 naming the field and the cap; prompt + max_tokens over training.maxSeqLen is context_length_exceeded", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-'));
  const episode = gateway.open({ round: 'campaign-caps/r1', step: 0, episode: 'p0-c0' }, sampler(dir, { maxSeqLen: 64 }));
  const drawn = await drawnBy(sessionId);
  const refused = [
    [{ max_tokens: 5 }, "max_tokens: 5 is over the cap of 4 (the round's sampling.maxTokens)"],
    [{ max_completion_tokens: 4096 }, 'max_completion_tokens: 4096 is over the cap of 4'],
    [{ n: 2 }, 'n: 2 is over the cap of 1'],
  ] as const;
  for (const [extra, message] of refused) {
    const answer = await chat(episode.url, episode.token, hello, extra);
    expect(answer).toMatchObject({ status: 400, body: { error: { code: 'invalid_request' } } });
    expect(answer.body.error.message).toContain(message);
  }
  const long = [{ role: 'user', content: 'Say a number. '.repeat(40) }];
  const overlong = await chat(episode.url, episode.token, long);
  expect(overlong).toMatchObject({ status: 400, body: { error: { code: 'context_length_exceeded' } } });
  expect(overlong.body.error.message).toMatch(
    /maximum context length is 64 tokens \(training\.maxSeqLen\): the prompt is \d+ tokens and max_tokens 4/,
  );
  expect(await drawnBy(sessionId)).toBe(drawn); // nothing refused was sampled
  // At the caps: served (and counted as the episode's one completion so far).
  const atCap = await chat(episode.url, episode.token, hello, { max_tokens: 4, n: 1 });
  expect(atCap.status).toBe(200);
  expect(atCap.body.choices).toHaveLength(1);
  expect(atCap.body.choices[0].token_ids.length).toBeLessThanOrEqual(4);
  gateway.end(episode.id);
});

test("a token stops working once its episode's record is final, and on a worker restarted on the same address", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-'));
  const first = await SamplerGateway.start();
  const port = Number(new URL(first.url).port);
  const steps = sampler(dir);
  const done = first.open({ round: 'campaign-end/r1', step: 0, episode: 'p0-c0' }, steps);
  const going = first.open({ round: 'campaign-end/r1', step: 0, episode: 'p0-c1' }, steps);
  const gatewayFile = path.join(dir, 'gateways', 's0000000.json');
  await writeGatewayFile(gatewayFile, { 'p0-c0': done, 'p0-c1': going });
  expect((await chat(done.url, done.token, hello)).status).toBe(200);
  // The Python worker records the episode's result: from then on its token is refused, its sibling's is not.
  fs.writeFileSync(path.join(dir, 'p0-c0.json'), JSON.stringify({ reward: 1, turns: [] }));
  expect(await chat(done.url, done.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'episode_ended' } } });
  expect((await chat(going.url, going.token, hello)).status).toBe(200);

  // The worker restarts on the same address; the step's next attempt takes over the accesses the store names.
  await first.close();
  const second = await SamplerGateway.start({ port });
  try {
    await second.retire(gatewayFile, { round: 'campaign-end/r1', step: 0 }, steps);
    const drawn = await drawnBy(sessionId);
    for (const old of [done, going])
      expect(await chat(old.url, old.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'episode_ended' } } });
    // A new access for the unfinished episode works; the finished one's refuses even a new token (its record is final).
    const again = second.open({ round: 'campaign-end/r1', step: 0, episode: 'p0-c1' }, steps);
    expect((await chat(again.url, again.token, hello)).status).toBe(200);
    const late = second.open({ round: 'campaign-end/r1', step: 0, episode: 'p0-c0' }, steps);
    expect(await chat(late.url, late.token, hello)).toMatchObject({ status: 401, body: { error: { code: 'episode_ended' } } });
    expect(await drawnBy(sessionId)).toBe(drawn); // the replayed p0-c1 turn came from its record
  } finally {
    await second.close();
  }
});

test('a provider failure reaches the episode as a generic 500 with a reference: no provider text, URL or key; the detail is logged masked', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-'));
  const logged: Record<string, unknown>[] = [];
  const episode = gateway.open({ round: 'campaign-mask/r1', step: 0, episode: 'p0-c0' }, sampler(dir, { logged }));
  // The provider answers the sample with an error that quotes the request's headers, the key among them.
  await setFaults(emulator, { rules: [{ kind: 'echo-headers', status: 400, method: 'POST', path: 'operations/sample', max: 1 }] });
  try {
    const answer = await chat(episode.url, episode.token, hello);
    expect(answer).toMatchObject({ status: 500, body: { error: { code: 'sampler_error', type: 'sampler_error' } } });
    const reference = /reference ([0-9a-f]{8})/.exec(answer.body.error.message)?.[1];
    expect(reference).toBeDefined();
    for (const leak of [apiKey, new URL(emulator.url).host, 'operations/sample', 'idempotency', 'authorization', sessionId])
      expect(answer.text.toLowerCase()).not.toContain(leak.toLowerCase());
    // The detail is in the worker's log under the same reference, with the key masked.
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ reference, round: 'campaign-mask/r1', episode: 'p0-c0' });
    expect(String(logged[0]!.error)).toMatch(/400/);
    expect(JSON.stringify(logged)).not.toContain(apiKey);
  } finally {
    await setFaults(emulator, {});
  }
  gateway.end(episode.id);
});

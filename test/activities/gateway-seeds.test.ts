import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SamplerGateway, type EpisodeSampler, type TurnRecord } from '../../activities/gateway';
import { tokenizerFor } from '../../config/io/tokenizer';
import type { TogetherProvider } from '../../providers/together/client';
import { ledger, startTestEmulator, testApiKey, togetherProvider, type RunningEmulator } from '../helpers/emulator';

// The sampler gateway on a Together generator of 2 replicas, where a seed fails the sample (INTERNAL_ERROR): turns
// go unseeded, a request's own seed is not passed on, and a turn whose record was lost still gets its first draw
// back, by its idempotency key.

let emulator: RunningEmulator;
let provider: TogetherProvider;
let gateway: SamplerGateway;
let sessionId: string;
let resourceId: string;

beforeAll(async () => {
  emulator = await startTestEmulator();
  provider = togetherProvider(emulator, testApiKey());
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'test-gateway-seeds', generatorReplicas: 2 });
  resourceId = resource.id;
  await provider.waitReady(resource.id, { pollIntervalMs: 20 });
  sessionId = (await provider.openSession({ resourceId: resource.id, loraRank: 8 })).id;
  gateway = await SamplerGateway.start();
});

afterAll(async () => {
  await gateway?.close();
  await provider?.deactivate(resourceId);
  await provider?.close();
  await emulator?.close();
});

/** A sampler as episodes.ts makes one for a Together round without sampling.seed: no seedBase. */
function unseededSampler(recordsDir: string): EpisodeSampler {
  return {
    tokenizer: tokenizerFor('roundhouse/tiny-chat', undefined),
    recordsDir,
    defaults: { maxTokens: 4, temperature: 1 },
    maxTurns: 3,
    model: 'roundhouse/tiny-chat',
    counts: { sampled: 0, replayed: 0 },
    log: () => undefined,
    async sample(promptTokens, params, n, key) {
      const handle = await provider.submitSample(sessionId, `${path.basename(recordsDir)}/${key}`, [promptTokens], params, {
        numSamples: n,
      });
      const [result] = await provider.awaitOperation(handle);
      return result!;
    },
  };
}

async function chat(url: string, token: string, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ model: 'roundhouse/tiny-chat', messages: [{ role: 'user', content: 'Say a number.' }], ...extra }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const sampleOperations = async () => (await ledger(emulator)).sessions.find((s) => s.id === sessionId)!.sampling.operations;

test("unseeded turns on 2 replicas: a request's seed is not passed on, and a lost record gets its first draw back by key", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-gateway-seeds-'));
  const sampler = unseededSampler(path.join(dir, 'round'));
  const episode = gateway.open({ round: 'campaign-s/r1', step: 0, episode: 'p0-c0' }, sampler);

  const first = await chat(episode.url, episode.token, { seed: 5 });
  expect(first.status).toBe(200);
  const recordFile = path.join(dir, 'round', `${first.body.id}.json`);
  const record = JSON.parse(fs.readFileSync(recordFile, 'utf8')) as TurnRecord;
  expect(record.params.seed).toBeUndefined();

  // The record lost (a crash between sampling and writing it): the turn is asked again under its key, not drawn again.
  fs.rmSync(recordFile);
  const drawn = await sampleOperations();
  const again = await chat(episode.url, episode.token, { seed: 5 });
  expect(again.status).toBe(200);
  expect(again.body.id).toBe(first.body.id);
  expect(again.body.choices[0].token_ids).toEqual(first.body.choices[0].token_ids);
  expect(await sampleOperations()).toBe(drawn);
  expect(sampler.counts).toEqual({ sampled: 2, replayed: 0 });
});

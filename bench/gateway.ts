import fs from 'node:fs';
import path from 'node:path';
import { SamplerGateway, type EpisodeSampler } from '../activities/gateway';
import { tokenizerFor, type ChatMessage } from '../config/io/tokenizer';
import type { SamplingParams } from '../providers/types';
import { togetherProvider } from '../test/helpers/emulator';
import { note, startBenchEmulator, type BenchContext, type Report } from './harness';

const TARGET = 0.02;
const MODEL = 'roundhouse/tiny-chat';

/**
 * What the sampler gateway adds to a completion: the same chat turns sampled from the emulator's Together sampler
 * (operations taking `latencyMs` each) directly (render, tokenise, submit, await) and through the gateway (an HTTP
 * request on loopback, the same render and tokenise, the sample, the turn's record written before the answer),
 * 8 at a time as an episode batch runs, in alternating rounds (direct, gateway, gateway, direct) so a drift of the
 * machine falls on both. The figure is the gateway's extra time per completion over the direct one's.
 */
export async function gatewayBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const latencyMs = ctx.quick ? 100 : 1000;
  // The emulator's sampler takes a session's requests one after another, so a completion costs a whole operation:
  // 8 a variant, 4 variants, about 33 s (on 2026-12-07, 32 a variant took 130 s and measured 0.001; 16, 65 s, 0.005).
  const perRound = 8;
  const emulator = await startBenchEmulator({ operationLatencyMs: latencyMs });
  const provider = togetherProvider(emulator, 'bench-gateway-key');
  const gateway = await SamplerGateway.start();
  const tokenizer = tokenizerFor(MODEL, undefined);
  try {
    const resource = await provider.provision({ model: MODEL, ownerTag: 'bench-gateway' });
    await provider.waitReady(resource.id, { pollIntervalMs: 20 });
    const { id: sessionId } = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7 });
    const params: SamplingParams = { maxTokens: 8, temperature: 1 };
    let n = 0;
    const sample = async (promptTokens: number[], p: SamplingParams, count: number, key: string) => {
      const handle = await provider.submitSample(sessionId, key, [promptTokens], p, { numSamples: count });
      return (await provider.awaitOperation(handle))[0]!;
    };
    const chatOf = (i: number): ChatMessage[] => [{ role: 'user', content: `Say a number above ${i}.` }];
    const direct = async (i: number) => {
      const promptTokens = tokenizer.encode(tokenizer.renderChat(chatOf(i), true));
      await sample(promptTokens, { ...params, seed: i }, 1, `direct/${i}`);
    };
    const recordsDir = fs.mkdtempSync(path.join(ctx.scratch, 'gateway-'));
    const viaGateway = async (i: number) => {
      const sampler: EpisodeSampler = {
        tokenizer,
        recordsDir,
        defaults: params,
        maxTurns: 4,
        model: MODEL,
        counts: { sampled: 0, replayed: 0 },
        sample: (promptTokens, p, count, key) => sample(promptTokens, p, count, `gateway/${key}`),
        log: (message, fields) => process.stderr.write(`${message} ${JSON.stringify(fields)}\n`),
      };
      const access = gateway.open({ round: 'bench', step: 0, episode: `e${i}` }, sampler);
      const res = await fetch(`${access.url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${access.token}` },
        body: JSON.stringify({ model: MODEL, messages: chatOf(i), logprobs: true }),
      });
      if (res.status !== 200) throw new Error(`the gateway answered ${res.status}: ${await res.text()}`);
      await res.json();
      gateway.end(access.id);
    };
    const timed = async (fn: (i: number) => Promise<void>) => {
      const t0 = performance.now();
      for (let batch = 0; batch < perRound; batch += 8) await Promise.all(Array.from({ length: 8 }, () => fn(n++)));
      return (performance.now() - t0) / perRound;
    };
    const rounds: { kind: 'direct' | 'gateway'; msPerCompletion: number }[] = [];
    for (const kind of ['direct', 'gateway', 'gateway', 'direct'] as const) {
      const msPerCompletion = await timed(kind === 'direct' ? direct : viaGateway);
      note(`gateway ${kind}: ${msPerCompletion.toFixed(1)} ms a completion (8 at a time, ${latencyMs} ms operations)`);
      rounds.push({ kind, msPerCompletion });
    }
    const mean = (kind: string) => rounds.filter((r) => r.kind === kind).reduce((a, r) => a + r.msPerCompletion, 0) / 2;
    const overhead = mean('gateway') / mean('direct') - 1;
    report({
      name: `gateway.overheadPerCompletion.latency${latencyMs}ms`,
      value: overhead,
      target: `≤ ${TARGET}`,
      met: overhead <= TARGET,
    });
    report({ name: `gateway.addedMsPerCompletion.latency${latencyMs}ms`, value: mean('gateway') - mean('direct'), target: 'info' });
    await provider.deactivate(resource.id);
  } finally {
    await gateway.close();
    await provider.close();
    await emulator.close();
  }
}

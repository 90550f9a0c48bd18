import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { joinLocation } from '../config/io/artifacts';
import type { ChatMessage, TextTokenizer } from '../config/io/tokenizer';
import type { SampleResult, SamplingParams } from '../providers/types';
import { maskSecrets } from '../config/io/secrets';
import { readJson, writeJsonAtomic } from './files';
import { completionText } from './scoring';

/**
 * The sampler gateway: an OpenAI-compatible endpoint (`/v1/chat/completions`, `/v1/completions`) that this worker
 * serves for the episodes of the rounds it runs, backed by the round's own sampler (whatever its dialect). Each
 * episode has a URL and a bearer token of its own, bound to its round, step and episode; a token is refused on
 * another episode's URL and once its episode has ended (its record in the store is final, or its step ended). The spec
 * bounds what a request may ask: `max_tokens` up to the round's sampling.maxTokens, `n` 1, `maxTurns` completions per
 * episode, prompt + max_tokens within training.maxSeqLen; anything over is refused with an OpenAI-style 400 naming
 * the field and the bound. A sampler failure reaches the episode as a generic 500 with a reference; its detail (secrets
 * masked) goes to the worker's log. Every completion is recorded under the episode before it is
 * answered — the exact prompt tokens (the chat template rendered and tokenised here), completion tokens, logprobs and
 * the policy version that sampled them — and a request the episode has made before (same turn, same prompt tokens,
 * same parameters) is answered from its record, so a rollout retried after a crash replays its finished turns without
 * sampling them again. The round trains on these records, never on a re-tokenised transcript.
 */

/** One completion as recorded (and as trained on). */
export interface TurnRecord {
  /** `<episode>/t<turn>-<digest>`: what the response's `id` carries, and the episode's list of turns names. */
  id: string;
  turn: number;
  promptTokens: number[];
  choices: { tokens: number[]; logprobs: number[]; text: string; finishReason: 'stop' | 'length' }[];
  /** The policy version (optimizer step) the sampler served when it drew this turn. */
  policyVersion?: number;
  params: SamplingParams & { n: number };
}

/** What an episode samples with: the round's tokenizer and sampler, and where its turns are recorded. */
export interface EpisodeSampler {
  tokenizer: TextTokenizer;
  /** `key` identifies the request (episode, turn, digest): the provider deduplicates a repeated keyed submit. */
  sample(promptTokens: number[], params: SamplingParams, n: number, key: string): Promise<SampleResult>;
  /** The step's folder of episode records: turns go under `<recordsDir>/<episode>/`. */
  recordsDir: string;
  /** The spec's sampling: what a request that leaves a parameter out gets; its maxTokens is also the cap. */
  defaults: SamplingParams;
  /** Distinct completions served per episode, whatever the request's messages say (a replay is not a new one). */
  maxTurns: number;
  /** The round's training.maxSeqLen: a turn whose prompt and max_tokens do not fit could not be trained as played. */
  maxSeqLen?: number;
  /** Where a sampler failure's detail goes (already masked): the episode itself gets only a reference to it. */
  log: (message: string, fields: Record<string, unknown>) => void;
  model: string;
  /**
   * What each turn's seed derives from (with the turn's identity), or undefined: turns send no seed, and a request's
   * own `seed` is not passed on (config/rules/sampling.ts: seedBase; a seed fails Together's multi-replica generators).
   */
  seedBase?: number;
  /** Counts for the step's record. */
  counts: { sampled: number; replayed: number };
}

export interface EpisodeBinding {
  /** The round's identity (campaign, round, lineage): for errors and the refused-token check. */
  round: string;
  step: number;
  /** The episode's key within the step (`p3-c1`). */
  episode: string;
}

interface OpenEpisode {
  binding: EpisodeBinding;
  sampler: EpisodeSampler;
  tokenDigest: Buffer;
  ended: boolean;
  /** The completions (record names) this episode's token was served or is being served: what maxTurns counts. */
  served: Set<string>;
}

export interface EpisodeAccess {
  id: string;
  /** The episode's OpenAI base URL (`…/episodes/<id>/v1`). */
  url: string;
  token: string;
}

class GatewayError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

const MAX_BODY = 16 * 1024 * 1024;
/** Each episode is one sample of its group (round.grpo.groupSize episodes), and a turn trains on one choice. */
const MAX_N = 1;
const digestOf = (token: string) => createHash('sha256').update(token).digest();

export class SamplerGateway {
  private readonly episodes = new Map<string, OpenEpisode>();
  /** Ended episodes are forgotten after a while; until then their tokens get a clear refusal. */
  private readonly endedAt = new Map<string, number>();

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
  ) {}

  /**
   * Listens on `host:port` (loopback and a free port by default); `advertise` is the base URL Python workers on
   * other hosts reach it by (ROUNDHOUSE_GATEWAY_URL).
   */
  static async start(options: { host?: string; port?: number; advertise?: string } = {}): Promise<SamplerGateway> {
    const host = options.host ?? '127.0.0.1';
    let gateway: SamplerGateway | undefined;
    const server = http.createServer((req, res) => void gateway!.handle(req, res));
    server.keepAliveTimeout = 30_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
    server.unref(); // the worker's own lifetime decides; the gateway never keeps a process alive
    const { port } = server.address() as AddressInfo;
    gateway = new SamplerGateway(server, (options.advertise ?? `http://${host}:${port}`).replace(/\/+$/, ''));
    return gateway;
  }

  /** Opens an episode: its URL and a token valid only there, until `end`. */
  open(binding: EpisodeBinding, sampler: EpisodeSampler): EpisodeAccess {
    const id = randomBytes(12).toString('hex');
    const token = `rhe_${randomBytes(32).toString('base64url')}`;
    this.episodes.set(id, { binding, sampler, tokenDigest: digestOf(token), ended: false, served: new Set() });
    return { id, url: `${this.url}/episodes/${id}/v1`, token };
  }

  /**
   * Takes over, ended, the accesses an earlier attempt of a step gave out (its gateway file in the store, `location`):
   * when that attempt's worker was this one, restarted on the same address, their tokens get a clear `episode_ended`.
   */
  async retire(location: string, binding: Omit<EpisodeBinding, 'episode'>, sampler: EpisodeSampler): Promise<void> {
    const earlier = await readJson<{ episodes?: Record<string, { url: string; token: string }> }>(location);
    for (const [episode, access] of Object.entries(earlier?.episodes ?? {})) {
      const id = /\/episodes\/([0-9a-f]{24})\/v1$/.exec(access.url)?.[1];
      if (!id || this.episodes.has(id) || !access.url.startsWith(`${this.url}/`)) continue;
      this.episodes.set(id, {
        binding: { ...binding, episode },
        sampler,
        tokenDigest: digestOf(access.token),
        ended: false,
        served: new Set(),
      });
      this.end(id);
    }
  }

  /** Ends an episode: its token is refused from now on. */
  end(id: string): void {
    const episode = this.episodes.get(id);
    if (!episode) return;
    episode.ended = true;
    this.endedAt.set(id, Date.now());
    // Keep ended episodes a minute (a clear "ended" answer), then forget them ("unknown episode").
    for (const [old, at] of this.endedAt) {
      if (Date.now() - at < 60_000) break;
      this.endedAt.delete(old);
      this.episodes.delete(old);
    }
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    try {
      const match = /^\/episodes\/([0-9a-f]{24})\/v1\/(chat\/completions|completions|models)\/?$/.exec((req.url ?? '').split('?')[0]!);
      if (!match) throw new GatewayError(404, `no such route: ${req.method} ${req.url}`, 'not_found');
      const episode = await this.authorize(match[1]!, req.headers.authorization);
      if (match[2] === 'models') return send(res, 200, { object: 'list', data: [{ id: episode.sampler.model, object: 'model' }] });
      if (req.method !== 'POST') throw new GatewayError(405, `${match[2]} takes POST`, 'method_not_allowed');
      const body = await readBody(req);
      const answer = match[2] === 'chat/completions' ? await this.chat(episode, body) : await this.completion(episode, body);
      if (episode.ended) throw new GatewayError(401, 'the episode ended while this request was sampled', 'episode_ended');
      send(res, 200, answer);
    } catch (err) {
      const e = err instanceof GatewayError ? err : this.masked(err, req.url ?? '');
      send(res, e.status, { error: { message: e.message, type: e.code, code: e.code } });
    }
  }

  /**
   * A failure under the gateway (the provider's, or the store's) as the episode sees it: a generic message with a
   * reference, never the provider's text (request ids, URLs, keys, raw bodies); the detail, masked, is logged.
   */
  private masked(err: unknown, url: string): GatewayError {
    const reference = randomBytes(4).toString('hex');
    const id = /^\/episodes\/([0-9a-f]{24})\//.exec(url)?.[1];
    const episode = id ? this.episodes.get(id) : undefined;
    const detail = maskSecrets(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
    episode?.sampler.log('the sampler gateway could not answer a turn', { reference, ...episode.binding, error: detail });
    return new GatewayError(
      500,
      `the round's sampler failed on this turn (reference ${reference}, in the Roundhouse worker's log)`,
      'sampler_error',
    );
  }

  private async authorize(id: string, header: string | undefined): Promise<OpenEpisode> {
    const episode = this.episodes.get(id);
    if (!episode) throw new GatewayError(404, `unknown episode ${id} (its round is not running on this worker)`, 'unknown_episode');
    const token = /^Bearer\s+(\S+)$/i.exec(header ?? '')?.[1];
    if (!token || !timingSafeEqual(digestOf(token), episode.tokenDigest))
      throw new GatewayError(401, `the bearer token is not episode ${id}'s`, 'invalid_token');
    // An episode ends when its record in the store is final: known after a restart too. A store that cannot say fails
    // the request (a 500: the episode is retried), never lets the token through.
    if (!episode.ended && (await readJson(joinLocation(episode.sampler.recordsDir, `${episode.binding.episode}.json`))))
      episode.ended = true;
    if (episode.ended)
      throw new GatewayError(401, `episode ${episode.binding.episode} of step ${episode.binding.step + 1} has ended`, 'episode_ended');
    return episode;
  }

  private params(episode: OpenEpisode, body: Record<string, unknown>): SamplingParams & { n: number } {
    const d = episode.sampler.defaults;
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
    const stop = typeof body.stop === 'string' ? [body.stop] : Array.isArray(body.stop) ? body.stop.map(String) : d.stop;
    const n = num(body.n) ?? 1;
    if (!Number.isInteger(n) || n < 1 || n > MAX_N)
      throw new GatewayError(
        400,
        `n: ${String(body.n)} is over the cap of ${MAX_N} (each episode is one sample of its group: round.grpo.groupSize)`,
        'invalid_request',
      );
    const field = num(body.max_completion_tokens) !== undefined ? 'max_completion_tokens' : 'max_tokens';
    const maxTokens = num(body.max_completion_tokens) ?? num(body.max_tokens) ?? d.maxTokens;
    if (!Number.isInteger(maxTokens) || maxTokens < 1)
      throw new GatewayError(400, `${field}: ${maxTokens} is not a positive integer`, 'invalid_request');
    if (maxTokens > d.maxTokens)
      throw new GatewayError(
        400,
        `${field}: ${maxTokens} is over the cap of ${d.maxTokens} (the round's sampling.maxTokens)`,
        'invalid_request',
      );
    return {
      n,
      maxTokens,
      temperature: num(body.temperature) ?? d.temperature,
      ...((num(body.top_p) ?? d.topP) !== undefined ? { topP: num(body.top_p) ?? d.topP } : {}),
      ...(d.topK !== undefined ? { topK: d.topK } : {}),
      ...(stop?.length ? { stop } : {}),
      ...(num(body.seed) !== undefined && episode.sampler.seedBase !== undefined ? { seed: num(body.seed) } : {}),
    };
  }

  /** The record of this request (read back, or sampled now and written before it is answered). */
  private async turn(
    episode: OpenEpisode,
    turn: number,
    promptTokens: number[],
    params: SamplingParams & { n: number },
  ): Promise<TurnRecord> {
    const { sampler, binding } = episode;
    if (sampler.maxSeqLen !== undefined && promptTokens.length + params.maxTokens > sampler.maxSeqLen)
      throw new GatewayError(
        400,
        `This model's maximum context length is ${sampler.maxSeqLen} tokens (training.maxSeqLen): the prompt is ` +
          `${promptTokens.length} tokens and max_tokens ${params.maxTokens}`,
        'context_length_exceeded',
      );
    const digest = createHash('sha256')
      .update(JSON.stringify([promptTokens, params]))
      .digest('hex')
      .slice(0, 16);
    const name = `t${turn}-${digest}`;
    // Counted as served, not read from the request (a request that leaves its history out is a turn all the same); a
    // completion served again (an episode retried on the same token replays its turns) is not a new one.
    if (!episode.served.has(name) && episode.served.size >= sampler.maxTurns)
      throw new GatewayError(
        400,
        `episode ${binding.episode}: completion ${episode.served.size + 1} is past round.grpo.environment.maxTurns (${sampler.maxTurns})`,
        'max_turns',
      );
    episode.served.add(name);
    const location = joinLocation(sampler.recordsDir, binding.episode, `${name}.json`);
    const recorded = await readJson<TurnRecord>(location).catch(() => undefined);
    if (recorded) {
      sampler.counts.replayed++;
      return recorded;
    }
    // Where turns are seeded, a request without a seed gets one from its identity (round, step, episode, turn,
    // request), so the episodes of a group, alike so far, draw apart. A turn sampled again (its record lost) returns
    // what was drawn by its key (`${episode}/${name}`), seeded or not.
    const identity = createHash('sha256')
      .update(JSON.stringify([binding.round, binding.step, binding.episode, name]))
      .digest('hex');
    const seed =
      params.seed ?? (sampler.seedBase === undefined ? undefined : (sampler.seedBase + Number.parseInt(identity.slice(0, 8), 16)) >>> 0);
    const result = await sampler.sample(
      promptTokens,
      { ...params, ...(seed !== undefined ? { seed } : {}) },
      params.n,
      `${binding.episode}/${name}`,
    );
    const record: TurnRecord = {
      id: `${binding.episode}/${name}`,
      turn,
      promptTokens,
      choices: result.sequences.map((s) => ({
        tokens: s.tokens,
        logprobs: s.logprobs ?? s.tokens.map(() => 0),
        text: completionText(sampler.tokenizer, s.tokens, params.stop),
        finishReason: s.stopReason,
      })),
      ...(result.policyVersion !== undefined ? { policyVersion: result.policyVersion } : {}),
      params,
    };
    await writeJsonAtomic(location, record);
    sampler.counts.sampled++;
    return record;
  }

  private async chat(episode: OpenEpisode, body: Record<string, unknown>): Promise<unknown> {
    if (!Array.isArray(body.messages) || body.messages.length === 0)
      throw new GatewayError(400, 'messages: a non-empty list of chat messages is required', 'invalid_request');
    const messages = body.messages.map(chatMessage);
    const tools = Array.isArray(body.tools) ? body.tools : undefined;
    const { tokenizer } = episode.sampler;
    if (!tokenizer.hasChatTemplate)
      throw new GatewayError(400, `${episode.sampler.model} has no chat template: use /v1/completions`, 'invalid_request');
    const promptTokens = tokenizer.encode(tokenizer.renderChat(messages, true, { tools }));
    const params = this.params(episode, body);
    const turn = messages.filter((m) => m.role === 'assistant').length;
    const record = await this.turn(episode, turn, promptTokens, params);
    const withLogprobs = body.logprobs === true;
    return {
      id: record.id,
      object: 'chat.completion',
      created: 0,
      model: typeof body.model === 'string' ? body.model : episode.sampler.model,
      // vLLM's extension (what verifiers and prime-rl read): the exact tokens on both sides.
      prompt_token_ids: record.promptTokens,
      choices: record.choices.map((c, index) => ({
        index,
        message: { role: 'assistant', content: c.text },
        finish_reason: c.finishReason,
        token_ids: c.tokens,
        logprobs: withLogprobs ? { content: c.tokens.map((t, i) => tokenLogprob(tokenizer, t, c.logprobs[i] ?? 0)) } : null,
      })),
      usage: usage(record),
      roundhouse: { turn: record.turn, policy_version: record.policyVersion ?? null },
    };
  }

  private async completion(episode: OpenEpisode, body: Record<string, unknown>): Promise<unknown> {
    const { tokenizer } = episode.sampler;
    const prompt = body.prompt;
    const promptTokens =
      typeof prompt === 'string'
        ? tokenizer.encode(prompt)
        : Array.isArray(prompt) && prompt.every((t) => Number.isInteger(t))
          ? (prompt as number[])
          : undefined;
    if (!promptTokens?.length) throw new GatewayError(400, 'prompt: a string or a list of token ids is required', 'invalid_request');
    const params = this.params(episode, body);
    // A completions client names its turn by the number of completions its prompt already holds: the caller's count.
    const turn = typeof body.turn === 'number' ? body.turn : 0;
    const record = await this.turn(episode, turn, promptTokens, params);
    const logprobs = typeof body.logprobs === 'number' || body.logprobs === true;
    return {
      id: record.id,
      object: 'text_completion',
      created: 0,
      model: typeof body.model === 'string' ? body.model : episode.sampler.model,
      prompt_token_ids: record.promptTokens,
      choices: record.choices.map((c, index) => ({
        index,
        text: c.text,
        finish_reason: c.finishReason,
        token_ids: c.tokens,
        logprobs: logprobs
          ? { tokens: c.tokens.map((t) => tokenizer.decode([t])), token_logprobs: c.logprobs, text_offset: null, top_logprobs: null }
          : null,
      })),
      usage: usage(record),
    };
  }
}

function chatMessage(m: unknown, i: number): ChatMessage {
  if (!m || typeof m !== 'object' || typeof (m as { role?: unknown }).role !== 'string')
    throw new GatewayError(400, `messages[${i}]: a message needs a role`, 'invalid_request');
  const { content, ...rest } = m as { role: string; content?: unknown };
  const text =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? content
            .map((p) =>
              p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '',
            )
            .join('')
        : '';
  return { ...rest, content: text };
}

function tokenLogprob(tokenizer: TextTokenizer, token: number, logprob: number) {
  const text = tokenizer.decode([token]);
  return { token: text, logprob, bytes: [...Buffer.from(text, 'utf8')], top_logprobs: [] };
}

function usage(record: TurnRecord) {
  const completion = record.choices.reduce((a, c) => a + c.tokens.length, 0);
  return {
    prompt_tokens: record.promptTokens.length,
    completion_tokens: completion,
    total_tokens: record.promptTokens.length + completion,
  };
}

async function readBody(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new GatewayError(413, `the request is over ${MAX_BODY} bytes`, 'too_large');
    chunks.push(chunk as Buffer);
  }
  try {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
    return body as Record<string, unknown>;
  } catch (err) {
    throw new GatewayError(400, `the body is not a JSON object: ${(err as Error).message}`, 'invalid_request');
  }
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

let shared: Promise<SamplerGateway> | undefined;

/**
 * This worker's gateway, started on first use: ROUNDHOUSE_GATEWAY_HOST (127.0.0.1) and ROUNDHOUSE_GATEWAY_PORT (a free
 * port) say where it listens; ROUNDHOUSE_GATEWAY_URL, the base URL Python workers on other hosts reach it by.
 */
export function sharedGateway(env: NodeJS.ProcessEnv = process.env): Promise<SamplerGateway> {
  shared ??= SamplerGateway.start({
    host: env.ROUNDHOUSE_GATEWAY_HOST || undefined,
    port: env.ROUNDHOUSE_GATEWAY_PORT ? Number(env.ROUNDHOUSE_GATEWAY_PORT) : undefined,
    advertise: env.ROUNDHOUSE_GATEWAY_URL || undefined,
  });
  shared.catch(() => (shared = undefined));
  return shared;
}

/** Where a step's episodes find the gateway: `{ episodes: { <key>: { url, token } } }`, rewritten by each attempt. */
export async function writeGatewayFile(location: string, episodes: Record<string, EpisodeAccess>): Promise<void> {
  await writeJsonAtomic(location, {
    episodes: Object.fromEntries(Object.entries(episodes).map(([k, a]) => [k, { url: a.url, token: a.token }])),
  });
}

/** The turns an episode's result names, read back from their records (in the episode's order). */
export async function readTurns(recordsDir: string, ids: string[]): Promise<TurnRecord[]> {
  return Promise.all(
    ids.map(async (id) => {
      const record = await readJson<TurnRecord>(joinLocation(recordsDir, `${id}.json`));
      if (!record) throw new Error(`${recordsDir}: the episode names turn ${id}, which the gateway never recorded`);
      return record;
    }),
  );
}

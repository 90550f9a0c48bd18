import { Context } from '@temporalio/activity';
import { joinLocation } from '../config/io/artifacts';
import { RoundhouseFailure } from '../config/rules/failures';
import { pythonStepFiles } from '../config/rules/round-files';
import { environmentName, PYTHON_ACTIVITIES, pythonEnvironment } from '../config/rules/python-calls';
import { seedBase, stopToSend } from '../config/rules/sampling';
import type { TextTokenizer } from '../config/io/tokenizer';
import type { Datum, SamplingParams, TrainingProvider } from '../providers/types';
import type { EpisodeItem, EpisodesResult } from '../workflows/python/contract';
import type { GrpoSegmentInput } from '../workflows/round/contract';
import type { TokenizedRow } from './data';
import { readTurns, sharedGateway, writeGatewayFile, type EpisodeAccess, type EpisodeSampler, type TurnRecord } from './gateway';
import { writeJsonAtomic } from './files';
import { callPython } from './python';
import { tokensThroughStop } from './scoring';

/**
 * Multi-turn GRPO: each group is `groupSize` episodes of the round's environment, run on a Python worker against
 * the sampler gateway this worker serves (activities/gateway.ts). The episodes' turns are the gateway's records; the
 * round trains on them as recorded.
 */

/** One model turn as trained on: the prompt it was sampled from, its tokens and the sampler's logprobs. */
export interface EpisodeTurn {
  /** The gateway's record of it (`<episode>/t<turn>-<digest>` under the step's folder). */
  id: string;
  promptTokens: number[];
  tokens: number[];
  logprobs: number[];
  policyVersion?: number;
}

export interface EpisodeSamples {
  turns: EpisodeTurn[];
  /** Turns whose prompt did not extend the previous turn's prompt + completion (the chat template rewrote history). */
  prefixBreaks: number;
}

/** The step's episodes: for each prompt, `groupSize` episodes, each with its reward (null: unscorable). */
export interface DrawnEpisodes {
  policyVersion?: number;
  groups: { completions: { tokens: number[]; logprobs: number[]; text: string; reward: number | null; episode: EpisodeSamples }[] }[];
  /**
   * `sampled`: the distinct turns the step's episodes are made of (each drawn once, by whichever attempt); `replayed`:
   * requests this attempt's gateway answered from a record (an episode retried after its Python worker died).
   */
  counts: { sampled: number; replayed: number };
}

/** Whether `longer` starts with `prefix`. */
function extendsTokens(longer: number[], prefix: number[]): boolean {
  if (longer.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (longer[i] !== prefix[i]) return false;
  return true;
}

/**
 * An episode's turns, checked: each turn's prompt should extend the previous turn's prompt and completion. A turn's
 * tokens end at its stop string, where the text the environment was answered with ends (a Tinker sampler, which takes
 * no stop strings, runs on past it; the record keeps what it drew).
 */
export function episodeOf(records: TurnRecord[], tokenizer: TextTokenizer): EpisodeSamples {
  const turns = records.map((r) => {
    const tokens = tokensThroughStop(tokenizer, r.choices[0]?.tokens ?? [], r.params.stop);
    return {
      id: r.id,
      promptTokens: r.promptTokens,
      tokens,
      logprobs: (r.choices[0]?.logprobs ?? []).slice(0, tokens.length),
      ...(r.policyVersion !== undefined ? { policyVersion: r.policyVersion } : {}),
    };
  });
  let prefixBreaks = 0;
  for (let i = 1; i < turns.length; i++) {
    const before = turns[i - 1]!;
    if (!extendsTokens(turns[i]!.promptTokens, [...before.promptTokens, ...before.tokens])) prefixBreaks++;
  }
  return { turns, prefixBreaks };
}

/**
 * An episode's datums: when every turn's prompt extends the one before, one sequence (the last prompt and its
 * completion) with each model turn's tokens weighted 1 and carrying its sampler logprobs, and the environment's
 * tokens between them weighted 0; when the template broke that, one datum per turn (its prompt, then its tokens).
 * Never a re-tokenised transcript.
 */
export function episodeDatums(episode: EpisodeSamples, advantage: number): Datum[] {
  const turns = episode.turns.filter((t) => t.tokens.length > 0);
  if (turns.length === 0) return [];
  const sequences: { tokens: number[]; logprobs: (number | undefined)[] }[] = [];
  if (episode.prefixBreaks === 0) {
    const last = turns[turns.length - 1]!;
    const tokens = [...last.promptTokens, ...last.tokens];
    const logprobs: (number | undefined)[] = tokens.map(() => undefined);
    for (const t of turns) t.tokens.forEach((_tok, i) => (logprobs[t.promptTokens.length + i] = t.logprobs[i] ?? 0));
    sequences.push({ tokens, logprobs });
  } else {
    for (const t of turns)
      sequences.push({
        tokens: [...t.promptTokens, ...t.tokens],
        logprobs: [...t.promptTokens.map(() => undefined), ...t.tokens.map((_x, i) => t.logprobs[i] ?? 0)],
      });
  }
  return sequences.map(({ tokens, logprobs }) => {
    const target = tokens.slice(1);
    const at = (i: number) => logprobs[i + 1];
    return {
      modelInput: tokens.slice(0, -1),
      targetTokens: target,
      weights: target.map((_t, i) => (at(i) === undefined ? 0 : 1)),
      logprobs: target.map((_t, i) => at(i) ?? 0),
      advantages: target.map((_t, i) => (at(i) === undefined ? 0 : advantage)),
    };
  });
}

/** The chat an episode starts from: a chat row's messages before its answer, else the prompt as a user message. */
function startingChat(row: TokenizedRow): { role: string; content: string }[] {
  const messages = row.fields?.messages;
  if (Array.isArray(messages) && messages.length > 0) {
    const chat = messages as { role: string; content: string }[];
    return chat[chat.length - 1]?.role === 'assistant' ? chat.slice(0, -1) : chat;
  }
  return [{ role: 'user', content: row.prompt }];
}

/**
 * Runs a step's episodes on the Python worker and reads back what they sampled. Each episode gets its gateway URL
 * and token (written to the store: never in a history); the call's workflow id is the step's identity, so a retried
 * segment attaches to the call its first attempt started, and the episodes it finds unfinished replay their recorded
 * turns from this attempt's gateway.
 */
export async function drawEpisodes(options: {
  input: GrpoSegmentInput;
  provider: TrainingProvider;
  step: number;
  prompts: TokenizedRow[];
  tokenizer: TextTokenizer;
  /** The model's listing: whether its sampler takes stop strings (else the records cut at them). */
  model: { stopStrings?: boolean };
  key: (...parts: (string | number)[]) => string;
  signal: AbortSignal;
  /** Every completion waits for this first (the weights it must sample being synced): episodes may start before. */
  weightsReady?: Promise<unknown>;
}): Promise<DrawnEpisodes> {
  const { input, provider, step, prompts, tokenizer, model, key, signal, weightsReady } = options;
  const grpo = input.spec.round!.grpo!;
  const environment = grpo.environment!;
  const call = pythonEnvironment(input.spec)!;
  if (!input.episodesDir) throw new RoundhouseFailure('InvalidInput', 'round.grpo.environment: the round names no episodes directory');
  const s = input.spec.sampling;
  const recordsDir = pythonStepFiles.records(input.episodesDir, step, joinLocation);
  const log = Context.current().log; // taken now: the gateway answers outside this activity's context
  const counts = { sampled: 0, replayed: 0 };
  const defaults: SamplingParams = { maxTokens: s.maxTokens, temperature: s.temperature, topP: s.topP, topK: s.topK, stop: s.stop };
  const sampler: EpisodeSampler = {
    tokenizer,
    recordsDir,
    defaults,
    maxTurns: environment.maxTurns,
    maxSeqLen: input.spec.training.maxSeqLen,
    model: input.spec.provider.model,
    seedBase: seedBase(input.spec),
    counts,
    log: (message, fields) => log.warn(message, fields),
    async sample(promptTokens, params, n, requestKey) {
      await weightsReady;
      const sent = { ...params, stop: stopToSend(input.spec.provider.kind, model, params.stop) };
      const handle = await provider.submitSample(input.sessionId, key(`s${step}`, `episode:${requestKey}`), [promptTokens], sent, {
        numSamples: n,
      });
      const [result] = await provider.awaitOperation(handle, { signal });
      if (!result) throw new Error('the sampler returned no result');
      return result;
    },
  };
  const gateway = await sharedGateway();
  const items: EpisodeItem[] = [];
  const access: Record<string, EpisodeAccess> = {};
  const round = `${input.campaignId}/r${input.round}${input.lineage ? `/L${input.lineage}` : ''}`;
  prompts.forEach((row, i) => {
    for (let j = 0; j < grpo.groupSize; j++) {
      const episode = `p${i}-c${j}`;
      items.push({
        key: episode,
        prompt: startingChat(row),
        answer: row.answer,
        row: row.fields ?? { prompt: row.prompt, answer: row.answer },
        context: { step: step + 1, prompt: i, sample: j, line: row.line },
      });
      access[episode] = gateway.open({ round, step, episode }, sampler);
    }
  });
  const gatewayFile = pythonStepFiles.gateway(input.episodesDir, step, input.lineage, joinLocation);
  const itemsLocation = pythonStepFiles.batch(input.episodesDir, step, input.lineage, joinLocation);
  try {
    await gateway.retire(gatewayFile, { round, step }, sampler);
    await writeGatewayFile(gatewayFile, access);
    await writeJsonAtomic(itemsLocation, { items });
    const result = await callPython<EpisodesResult>(
      `python:${key(`s${step}`, 'episodes')}`,
      {
        call,
        role: 'environment',
        activity: PYTHON_ACTIVITIES.episodes,
        request: {
          environment: environmentName(environment),
          args: environment.args,
          items: itemsLocation,
          records: recordsDir,
          gateway: gatewayFile,
          model: input.spec.provider.model,
          concurrency: environment.concurrency ?? items.length,
        },
      },
      signal,
    );
    if (result.rewards.length !== items.length || result.turns.length !== items.length)
      throw new RoundhouseFailure(
        'EnvironmentFailed',
        `environment '${call.name}': ${result.rewards.length} results for ${items.length} episodes`,
      );
    const groups: DrawnEpisodes['groups'] = prompts.map(() => ({ completions: [] }));
    let policyVersion: number | undefined;
    await Promise.all(
      items.map(async (item, n) => {
        const records = await readTurns(recordsDir, result.turns[n]!);
        const episode = episodeOf(records, tokenizer);
        const first = episode.turns[0]?.policyVersion;
        if (first !== undefined) policyVersion = policyVersion === undefined ? first : Math.min(policyVersion, first);
        const last = records[records.length - 1]?.choices[0];
        groups[Number(item.context.prompt)]!.completions[Number(item.context.sample)] = {
          tokens: episode.turns.flatMap((t) => t.tokens),
          logprobs: episode.turns.flatMap((t) => t.logprobs),
          text: last?.text ?? '',
          reward: result.rewards[n] ?? null,
          episode,
        };
      }),
    );
    return { policyVersion, groups, counts: { sampled: new Set(result.turns.flat()).size, replayed: counts.replayed } };
  } finally {
    for (const a of Object.values(access)) gateway.end(a.id);
  }
}

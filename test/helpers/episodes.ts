import fs from 'node:fs';
import path from 'node:path';
import type { Ledger } from '../../emulator/engine/ledger';
import { roundFiles } from '../../config/rules/round-files';
import type { TrainedListing } from '../../emulator/engine/trained';
import { ledger, type RunningEmulator } from './emulator';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import { arithmeticRoundInput } from './round';

/** The multi-turn game the environment tests play (verifiers' own MultiTurnEnv and Rubric). */
export const NUMBER_GAME = path.join(__dirname, '..', 'python', 'vf_number_game.py');

export type GameDialect = 'together' | 'tinker';

/**
 * A GRPO round of the number game over the arithmetic prompts: 4 prompts × 4 episodes a step, 3 model turns an
 * episode, episodes on the Python worker of task queue `pythonTaskQueue` (default `<campaignId>-py`).
 */
export function numberGameInput(options: {
  baseUrl: string;
  kind: GameDialect;
  campaignId: string;
  limit?: number;
  advanced?: string;
  /** The environment's kind and name (default: the verifiers game, 3 turns). */
  environment?: string;
  /** Extra `round.grpo` fields, and the loss (default: importance_sampling). */
  grpo?: string;
  /** The environment's task queue (a file's one Python worker may serve all its rounds). */
  pythonTaskQueue?: string;
}): RoundInput {
  const { baseUrl, kind, campaignId } = options;
  // Seeded turns (sampling.seed; Together sends none by default): the emulator counts a seeded draw made twice, so the
  // tests' "no turn drawn twice" can fail. Seed 0 draws what every dialect drew before seeds became opt-in.
  const input = arithmeticRoundInput({
    baseUrl,
    campaignId,
    limit: options.limit ?? 8, // 51 training sums: 13 steps of 4 prompts × 4 episodes (the last of 3 prompts)
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.02, loraRank: 8, maxSeqLen: 128, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1, seed: 0 }
${options.advanced ?? ''}
round: { kind: grpo, grpo: { groupSize: 4, ${options.grpo ?? 'loss: { type: importance_sampling }'}, environment: { ${options.environment ?? 'kind: verifiers, name: vf_number_game, args: { turns: 3 }'}, taskQueue: ${options.pythonTaskQueue ?? `${campaignId}-py`}, heartbeatTimeoutSeconds: 5, retry: { maxAttempts: 4, initialIntervalSeconds: 0.2 } } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind, baseUrl };
  return input;
}

export interface TurnFile {
  id: string;
  turn: number;
  promptTokens: number[];
  choices: { tokens: number[]; logprobs: number[]; text: string }[];
}

export interface EpisodeStepRecord {
  meanReward: number;
  turnsPerEpisode: number;
  turnsSampled: number;
  turnsReplayed: number;
  prefixBreaks: number;
}

/** The folder of a round's episode records (`<report>/round-<n>.episodes`), known before the round ends. */
export const episodesDirOf = (input: RoundInput): string => roundFiles(input.reportDir, input.round, path.join).episodes;

/** How many turns the gateway has recorded for a step (0-based) so far. */
export function turnsRecorded(input: RoundInput, step: number): number {
  const dir = path.join(episodesDirOf(input), `s${String(step).padStart(7, '0')}`);
  if (!fs.existsSync(dir)) return 0;
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .reduce((a, d) => a + fs.readdirSync(path.join(dir, d.name)).filter((f) => /^t\d+-[0-9a-f]+\.json$/.test(f)).length, 0);
}

/** Every turn the gateway recorded for the round, by `<step>/<episode>/<file>`. */
export function turnRecords(result: RoundResult): Map<string, TurnFile> {
  const dir = result.reportPath.replace(/\.json$/, '.episodes');
  const out = new Map<string, TurnFile>();
  for (const step of fs.readdirSync(dir).filter((d) => /^s\d+$/.test(d)))
    for (const episode of fs.readdirSync(path.join(dir, step)).filter((e) => !e.endsWith('.json')))
      for (const t of fs.readdirSync(path.join(dir, step, episode)).filter((f) => /^t\d+-[0-9a-f]+\.json$/.test(f)))
        out.set(`${step}/${episode}/${t}`, JSON.parse(fs.readFileSync(path.join(dir, step, episode, t), 'utf8')) as TurnFile);
  return out;
}

/** The round's step records, read from its report. */
export function episodeSteps(result: RoundResult): EpisodeStepRecord[] {
  return (JSON.parse(fs.readFileSync(result.reportPath, 'utf8')) as { steps: EpisodeStepRecord[] }).steps;
}

/** A datum as the emulator's trainer received it: the whole sequence, and per target position its weight and sampler logprob. */
export interface ReceivedDatum {
  tokens: number[];
  weights: number[];
  samplingLogprobs: number[];
}

/**
 * What the emulator's trainer received in each of a round's training passes (the emulator started with
 * `trainedBatches`), in step order: on keyed dialects its `<campaign>/…/s<step>/forward-backward` passes; on Tinker,
 * whose operations are keyed by `seq_id`, each training pass of the models of the round's trainers, one a GRPO step
 * from the step the model started at. A step trained again after a rollback counts as its last training.
 */
export async function trainedBatches(
  emulator: RunningEmulator,
  result: RoundResult,
  campaignId: string,
): Promise<{ step: number; datums: ReceivedDatum[] }[]> {
  const listing = (await (await fetch(`${emulator.url}/_emulator/trained`)).json()) as TrainedListing;
  const sessions = new Map((await ledger(emulator)).sessions.map((s) => [s.id, s]));
  const trainers = (JSON.parse(fs.readFileSync(result.reportPath, 'utf8')) as { deactivated_ids?: string[] }).deactivated_ids ?? [];
  const byStep = new Map<number, TrainedListing['sessions'][number]['batches'][number]['datums']>();
  for (const s of listing.sessions) {
    const model = trainers.some((id) => s.id.startsWith(`${id}:train:`));
    const l = sessions.get(s.id);
    const first = l ? l.step - l.optimizerSteps : 0; // the step a model resumed at
    s.batches.forEach((b, i) => {
      const keyed = b.key.startsWith(`${campaignId}/`) ? /\/s(\d+)\/forward-backward$/.exec(b.key) : null;
      if (keyed) byStep.set(Number(keyed[1]), b.datums);
      else if (model) byStep.set(first + i, b.datums);
    });
  }
  return [...byStep.entries()]
    .sort(([a], [b]) => a - b)
    .map(([step, datums]) => ({
      step,
      datums: datums.map((d) => ({
        tokens: [...d.inputTokens, ...d.targetTokens.slice(-1)],
        weights: d.weights,
        samplingLogprobs: d.samplingLogprobs ?? [],
      })),
    }));
}

/** The trained stretches of a datum (weight ≠ 0): where each starts in the sequence, its tokens and sampler logprobs. */
export function trainedRuns(datum: ReceivedDatum): { start: number; tokens: number[]; logprobs: number[] }[] {
  const runs: { start: number; tokens: number[]; logprobs: number[] }[] = [];
  datum.weights.forEach((w, j) => {
    if (w === 0) return;
    const last = runs[runs.length - 1];
    // Target position j is the sequence's token j + 1.
    if (last && last.start + last.tokens.length === j + 1) {
      last.tokens.push(datum.tokens[j + 1]!);
      last.logprobs.push(datum.samplingLogprobs[j]!);
    } else runs.push({ start: j + 1, tokens: [datum.tokens[j + 1]!], logprobs: [datum.samplingLogprobs[j]!] });
  });
  return runs;
}

/**
 * Checks what the trainer received (the emulator's record of each forward_backward) against the gateway's records:
 * every trained stretch is one recorded turn — its prompt right before it, its tokens and sampler logprobs exactly —
 * each record trained at most once; a group is trained whole or not at all, as many groups as the step kept (all of
 * them when it kept none: a zero-gradient step); an episode has 1 to `turns` turns; the gateway recorded no turn more
 * than it sampled. Returns the count of trained turns and of records.
 */
export async function expectTrainedAsRecorded(
  result: RoundResult,
  emulator: RunningEmulator,
  campaignId: string,
  turns = 3,
): Promise<{ trained: number; records: number }> {
  const records = turnRecords(result);
  const steps = episodeSteps(result) as (EpisodeStepRecord & { groupsKept: number })[];
  const batches = await trainedBatches(emulator, result, campaignId);
  expect(batches.map((b) => b.step)).toEqual(steps.map((_s, i) => i));
  let trained = 0;
  for (const { step, datums } of batches) {
    const prefix = `s${String(step).padStart(7, '0')}/`;
    const ofStep = [...records.entries()].filter(([k]) => k.startsWith(prefix));
    const used = new Set<string>();
    for (const datum of datums)
      for (const run of trainedRuns(datum)) {
        const match = ofStep.find(
          ([k, r]) =>
            !used.has(k) &&
            r.promptTokens.length === run.start &&
            r.promptTokens.every((t, i) => datum.tokens[i] === t) &&
            r.choices[0]!.tokens.length === run.tokens.length &&
            r.choices[0]!.tokens.every((t, i) => run.tokens[i] === t),
        );
        expect(match).toBeDefined();
        expect(run.logprobs).toEqual(match![1].choices[0]!.logprobs);
        used.add(match![0]);
        trained++;
      }
    const groupOf = (k: string) => /^s\d+\/p(\d+)-c\d+\//.exec(k)![1]!;
    const episodeOf = (k: string) => /^s\d+\/(p\d+-c\d+)\//.exec(k)![1]!;
    const trainable = ofStep.filter(([, r]) => r.choices[0]!.tokens.length > 0);
    const groups = new Set(trainable.map(([k]) => groupOf(k)));
    const trainedGroups = new Set([...used].map(groupOf));
    for (const g of trainedGroups) expect(trainable.filter(([k]) => groupOf(k) === g).every(([k]) => used.has(k))).toBe(true);
    expect(trainedGroups.size).toBe(steps[step]!.groupsKept || groups.size);
    const perEpisode = new Map<string, number>();
    for (const k of used) perEpisode.set(episodeOf(k), (perEpisode.get(episodeOf(k)) ?? 0) + 1);
    for (const n of perEpisode.values()) {
      expect(n).toBeGreaterThanOrEqual(1);
      expect(n).toBeLessThanOrEqual(turns);
    }
  }
  expect(records.size).toBe(steps.reduce((a, s) => a + s.turnsSampled, 0));
  return { trained, records: records.size };
}

/** Sample draws the emulator made twice (same request, same weights) across its sessions: a completion paid twice. */
export const repeatedDraws = (ledger: Ledger): number => ledger.sessions.reduce((a, s) => a + s.sampling.repeated, 0);

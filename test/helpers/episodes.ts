import fs from 'node:fs';
import path from 'node:path';
import type { Ledger } from '../../emulator/engine/ledger';
import type { RoundInput, RoundResult } from '../../workflows/round-contract';
import { arithmeticRoundInput } from './round';

/** The multi-turn game the environment tests play (verifiers' own MultiTurnEnv and Rubric). */
export const NUMBER_GAME = path.join(__dirname, '..', 'python', 'vf_number_game.py');

export type GameDialect = 'together' | 'tinker';

/**
 * A GRPO round of the number game over the arithmetic prompts: 4 prompts × 4 episodes a step, 3 model turns an
 * episode, episodes on the Python worker of task queue `<campaignId>-py`.
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
}): RoundInput {
  const { baseUrl, kind, campaignId } = options;
  const input = arithmeticRoundInput({
    baseUrl,
    campaignId,
    limit: options.limit ?? 8, // 51 training sums: 13 steps of 4 prompts × 4 episodes (the last of 3 prompts)
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.02, loraRank: 8, maxSeqLen: 128, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
${options.advanced ?? ''}
round: { kind: grpo, grpo: { groupSize: 4, ${options.grpo ?? 'loss: { type: importance_sampling }'}, environment: { ${options.environment ?? 'kind: verifiers, name: vf_number_game, args: { turns: 3 }'}, taskQueue: ${campaignId}-py, heartbeatTimeoutSeconds: 5, retry: { maxAttempts: 4, initialIntervalSeconds: 0.2 } } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind, baseUrl };
  return input;
}

export interface TurnFile {
  id: string;
  turn: number;
  promptTokens: number[];
  choices: { tokens: number[]; logprobs: number[] }[];
}

export interface EpisodeStepRecord {
  meanReward: number;
  turnsPerEpisode: number;
  turnsSampled: number;
  turnsReplayed: number;
  prefixBreaks: number;
}

interface StepFile {
  groups: { completions: { episode: { turns: { id: string; promptTokens: number[]; tokens: number[]; logprobs: number[] }[] } }[] }[];
}

/** The folder of a round's episode records (`<report>/round-<n>.episodes`), known before the round ends. */
export const episodesDirOf = (input: RoundInput): string => path.join(input.reportDir, `round-${input.round}.episodes`);

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
function turnRecords(result: RoundResult): Map<string, TurnFile> {
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

/**
 * Checks that every trained episode turn is one the gateway recorded (its prompt tokens, tokens and logprobs), that
 * each episode has 1 to `turns` turns, and that the gateway recorded no turn more than it sampled. Returns the count of
 * trained turns and of records.
 */
export function expectTrainedAsRecorded(result: RoundResult, turns = 3): { trained: number; records: number } {
  const dir = result.reportPath.replace(/\.json$/, '.samples');
  const files = fs
    .readdirSync(dir)
    .filter((f) => /^s\d+\.json$/.test(f))
    .sort()
    .map((f) => ({ step: f.replace(/\.json$/, ''), file: JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as StepFile }));
  const records = turnRecords(result);
  let trained = 0;
  for (const { step, file } of files)
    for (const g of file.groups)
      for (const c of g.completions) {
        expect(c.episode.turns.length).toBeGreaterThanOrEqual(1);
        expect(c.episode.turns.length).toBeLessThanOrEqual(turns);
        for (const t of c.episode.turns) {
          const record = records.get(`${step}/${t.id}.json`);
          expect(record).toBeDefined();
          expect(t.promptTokens).toEqual(record!.promptTokens);
          expect(t.tokens).toEqual(record!.choices[0]!.tokens);
          expect(t.logprobs).toEqual(record!.choices[0]!.logprobs);
          trained++;
        }
      }
  const steps = episodeSteps(result);
  expect(records.size).toBe(steps.reduce((a, s) => a + s.turnsSampled, 0));
  return { trained, records: records.size };
}

/** Sample draws the emulator made twice (same request, same weights) across its sessions: a completion paid twice. */
export const repeatedDraws = (ledger: Ledger): number => ledger.sessions.reduce((a, s) => a + s.sampling.repeated, 0);

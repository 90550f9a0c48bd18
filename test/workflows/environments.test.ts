import fs from 'node:fs';
import path from 'node:path';
import type { RoundInput, RoundResult } from '../../workflows/round-contract';
import { ledger } from '../helpers/emulator';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Multi-turn environments: a real `verifiers` environment (test/python/vf_number_game.py, written with verifiers' own
// MultiTurnEnv and Rubric) runs its episodes on a real Python worker against the sampler gateway the round's
// TypeScript worker serves; the sampler is the emulator's, over its Together and Tinker dialects.
const { env, runRound } = roundTestEnvironment({}, { ...process.env, TOGETHER_API_KEY: 'tg-env-key', TINKER_API_KEY: 'tml-env-key' });

const GAME = path.join(__dirname, '..', 'python', 'vf_number_game.py');
const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
});

async function pythonWorker(taskQueue: string, extra: Record<string, string> = {}): Promise<PythonWorker> {
  const worker = await startPythonWorker({ address: env.temporal.settings.address!, taskQueue, sources: [GAME], env: extra });
  workers.push(worker);
  return worker;
}

type Kind = 'together' | 'tinker';

function gameInput(kind: Kind, campaignId: string, extra = ''): RoundInput {
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId,
    limit: 8, // 51 training sums: 13 steps of 4 prompts × 4 episodes
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.02, loraRank: 8, maxSeqLen: 128, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, loss: { type: importance_sampling }, environment: { kind: verifiers, name: vf_number_game, args: { turns: 3 }, taskQueue: ${campaignId}-py, heartbeatTimeoutSeconds: 5, retry: { maxAttempts: 4, initialIntervalSeconds: 0.2 }${extra} } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind, baseUrl: env.emulator.url };
  return input;
}

interface Turn {
  id: string;
  turn: number;
  promptTokens: number[];
  choices: { tokens: number[]; logprobs: number[] }[];
}
interface StepFile {
  groups: {
    completions: {
      reward: number | null;
      tokens: number[];
      episode: { turns: { promptTokens: number[]; tokens: number[]; logprobs: number[] }[]; prefixBreaks: number };
    }[];
  }[];
}

const stepFiles = (result: RoundResult): StepFile[] => {
  const dir = result.reportPath.replace(/\.json$/, '.samples');
  return fs
    .readdirSync(dir)
    .filter((f) => /^s\d+\.json$/.test(f))
    .sort()
    .map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as StepFile);
};

/** Every turn record the gateway wrote, by step folder and episode. */
function turnRecords(result: RoundResult): Map<string, Turn> {
  const dir = result.reportPath.replace(/\.json$/, '.episodes');
  const out = new Map<string, Turn>();
  for (const step of fs.readdirSync(dir).filter((d) => /^s\d+$/.test(d)))
    for (const episode of fs.readdirSync(path.join(dir, step)).filter((e) => !e.endsWith('.json')))
      for (const t of fs.readdirSync(path.join(dir, step, episode)))
        out.set(`${step}/${episode}/${t}`, JSON.parse(fs.readFileSync(path.join(dir, step, episode, t), 'utf8')) as Turn);
  return out;
}

const report = (r: RoundResult) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));

test.each(['together', 'tinker'] as const)(
  'a verifiers multi-turn environment trains a GRPO round on %s: 3 model turns an episode, trained on the recorded tokens, reward rises',
  async (kind) => {
    const taskQueue = uniqueTaskQueue(`env-${kind}`);
    const input = gameInput(kind, `env-${taskQueue}`);
    await pythonWorker(`${input.campaignId}-py`);
    const result = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });

    const steps = report(result).steps as { meanReward: number; turnsPerEpisode: number; turnsSampled: number; turnsReplayed: number }[];
    expect(steps).toHaveLength(result.totalSteps!);
    const files = stepFiles(result);
    steps.forEach((s, i) => {
      expect(s.turnsPerEpisode).toBe(3);
      expect(s.turnsSampled).toBe(files[i]!.groups.length * 4 * 3); // prompts × 4 episodes × 3 turns, each sampled once
      expect(s.turnsReplayed).toBe(0);
    });
    // The episodes trained on are the gateway's records, turn for turn.
    const records = turnRecords(result);
    expect(records.size).toBe(steps.reduce((a, s) => a + s.turnsSampled, 0));
    for (const file of files)
      for (const g of file.groups)
        for (const c of g.completions) {
          expect(c.episode.turns).toHaveLength(3);
          for (const t of c.episode.turns) {
            const match = [...records.values()].find(
              (r) => r.promptTokens.join() === t.promptTokens.join() && r.choices[0]!.tokens.join() === t.tokens.join(),
            );
            expect(match).toBeDefined();
            expect(t.logprobs).toEqual(match!.choices[0]!.logprobs);
          }
        }
    const first = steps.slice(0, 3).reduce((a, s) => a + s.meanReward, 0) / 3;
    const last = steps.slice(-3).reduce((a, s) => a + s.meanReward, 0) / 3;
    process.stderr.write(`[env ${kind}] ${steps.length} steps; mean reward ${steps.map((s) => s.meanReward.toFixed(2)).join(' ')}\n`);
    expect(last).toBeGreaterThan(first);
    expect((await ledger(env.emulator)).active).toEqual([]);
  },
);

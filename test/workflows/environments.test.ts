import { ledger } from '../helpers/emulator';
import { episodeSteps, expectTrainedAsRecorded, NUMBER_GAME, numberGameInput, repeatedDraws } from '../helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Multi-turn environments: a real `verifiers` environment (test/python/vf_number_game.py, written with verifiers' own
// MultiTurnEnv and Rubric) runs its episodes on a real Python worker against the sampler gateway the round's
// TypeScript worker serves; the sampler is the emulator's, over its Together and Tinker dialects.
const { env, runRound } = roundTestEnvironment({}, { ...process.env, TOGETHER_API_KEY: 'tg-env-key', TINKER_API_KEY: 'tml-env-key' });

const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
});

test.each(['together', 'tinker'] as const)(
  'a verifiers multi-turn environment trains a GRPO round on %s: 3 model turns an episode, trained on the recorded tokens, reward rises',
  async (kind) => {
    const taskQueue = uniqueTaskQueue(`env-${kind}`);
    const input = numberGameInput({ baseUrl: env.emulator.url, kind, campaignId: `env-${taskQueue}` });
    workers.push(
      await startPythonWorker({ address: env.temporal.settings.address!, taskQueue: `${input.campaignId}-py`, sources: [NUMBER_GAME] }),
    );
    const before = repeatedDraws(await ledger(env.emulator));
    const result = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });

    const steps = episodeSteps(result);
    expect(steps).toHaveLength(result.totalSteps!);
    steps.forEach((s, i) => {
      expect(s.turnsPerEpisode).toBe(3);
      // prompts × 4 episodes × 3 turns, each sampled once (51 prompts: the last step has 3)
      expect(s.turnsSampled).toBe((i < 12 ? 4 : 3) * 4 * 3);
      expect(s.turnsReplayed).toBe(0);
    });
    // The episodes trained on are the gateway's records, turn for turn, and the emulator drew each once.
    const { trained, records } = expectTrainedAsRecorded(result);
    expect(trained).toBe(records);
    expect(repeatedDraws(await ledger(env.emulator))).toBe(before);

    const mean = (xs: { meanReward: number }[]) => xs.reduce((a, s) => a + s.meanReward, 0) / xs.length;
    process.stderr.write(`[env ${kind}] ${steps.length} steps; mean reward ${steps.map((s) => s.meanReward.toFixed(2)).join(' ')}\n`);
    expect(mean(steps.slice(-3))).toBeGreaterThan(mean(steps.slice(0, 3)));
    expect((await ledger(env.emulator)).active).toEqual([]);
  },
);

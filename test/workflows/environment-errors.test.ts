import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults } from '../helpers/emulator';
import { episodesDirOf, NUMBER_GAME, numberGameInput } from '../helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// An infrastructure error inside an environment is never a reward: a rubric's reward function that raises (which
// verifiers' Rubric would score 0.0), a gateway 5xx the environment swallows, a turn over training.maxSeqLen. Each
// round here is one step (3 prompts × 4 episodes) of test/python/vf_number_game.py on a real Python worker.
const { env, runRound } = roundTestEnvironment({}, { ...process.env, TOGETHER_API_KEY: 'tg-env-errors-key' });

const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
});

interface Call {
  kind: string;
  key: string;
  score?: number;
  error?: string;
}

function calls(file: string, kind: string): Call[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Call)
    .filter((c) => c.kind === kind);
}

/** The first step's episode records (what the Python worker kept per episode), by episode key. */
function episodeRewards(input: RoundInput): Map<string, number | null> {
  const dir = path.join(episodesDirOf(input), 's0000000');
  const out = new Map<string, number | null>();
  for (const f of fs.readdirSync(dir).filter((f) => /^p\d+-c\d+\.json$/.test(f)))
    out.set(f.replace(/\.json$/, ''), (JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as { reward: number | null }).reward);
  return out;
}

async function game(name: string, environment: string, calls: string): Promise<{ input: RoundInput; taskQueue: string }> {
  const taskQueue = uniqueTaskQueue(name);
  const input = numberGameInput({ baseUrl: env.emulator.url, kind: 'together', campaignId: `${name}-${taskQueue}`, limit: 2, environment });
  workers.push(
    await startPythonWorker({
      address: env.temporal.settings.address!,
      taskQueue: `${input.campaignId}-py`,
      sources: [NUMBER_GAME],
      env: { ROUNDHOUSE_TEST_CALLS: calls },
    }),
  );
  return { input, taskQueue };
}

const callsFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-env-calls-')), 'calls.jsonl');

async function failedRound(input: RoundInput, taskQueue: string): Promise<RoundResult> {
  const failure = await runRound(input, taskQueue).catch((err: Error & { cause?: { details?: RoundResult[] } }) => err);
  expect(failure).toBeInstanceOf(Error);
  return (failure as { cause?: { details?: RoundResult[] } }).cause!.details![0]!;
}

test("a rubric's reward function that raises on its first calls is retried, and the episodes are scored for real (never verifiers' 0.0)", async () => {
  const log = callsFile();
  const { input, taskQueue } = await game('env-judge', 'kind: verifiers, name: vf_number_game, args: { turns: 2, judge_fails: 3 }', log);
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 1 });
  const failed = calls(log, 'judge-failure');
  expect(failed).toHaveLength(3);
  // Each episode's recorded reward is the judge's own score of it, the three that failed included (retried).
  const judged = new Map(calls(log, 'judged').map((c) => [c.key, c.score!]));
  const rewards = episodeRewards(input);
  expect(rewards.size).toBe(12);
  for (const [key, reward] of rewards) expect(reward).toBe(judged.get(key));
  for (const f of failed) expect(judged.has(f.key)).toBe(true);
});

test('a rubric whose reward function always raises fails the round by name after the retries, with nothing trained and nothing active', async () => {
  const log = callsFile();
  const { input, taskQueue } = await game(
    'env-judge-down',
    'kind: verifiers, name: vf_number_game, args: { turns: 2, judge_fails: 100000 }',
    log,
  );
  const failed = await failedRound(input, taskQueue);
  expect(failed).toMatchObject({ status: 'failed', errorType: 'EnvironmentFailed', stepsApplied: 0 });
  expect(failed.errorMessage).toMatch(
    /environment 'verifiers:vf_number_game' failed on step 1, prompt \d, sample \d, line \d+: .*reward function 'judged_digit_share' raised TimeoutError: the judge did not answer in time/,
  );
  // Four attempts (the spec's retry.maxAttempts) at all 12 episodes, none of them scored.
  expect(calls(log, 'judge-failure')).toHaveLength(4 * 12);
  expect(calls(log, 'judged')).toHaveLength(0);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('a gateway 5xx the environment swallows fails the episode (retried), never the reward it made of the broken turn; the error it saw is masked', async () => {
  const log = callsFile();
  const { input, taskQueue } = await game('env-5xx', 'kind: python, name: swallowing_chat', log);
  // The provider fails the first two samples with an error that quotes the request's headers (its key among them).
  await setFaults(env.emulator, { rules: [{ kind: 'echo-headers', status: 400, method: 'POST', path: 'operations/sample', max: 2 }] });
  const result = await runRound(input, taskQueue).finally(() => setFaults(env.emulator, {}));
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 1 });
  const swallowed = calls(log, 'swallowed');
  expect(swallowed).toHaveLength(2);
  for (const s of swallowed) {
    expect(s.error).toMatch(/sampler_error/);
    expect(s.error).not.toContain('tg-env-errors-key');
    expect(s.error).not.toContain(new URL(env.emulator.url).host);
  }
  // The -1 the environment returned for its broken turn was never recorded: every episode has its real reward.
  const rewards = [...episodeRewards(input).values()];
  expect(rewards).toHaveLength(12);
  expect(rewards.every((r) => r !== null && r >= 0 && r <= 1)).toBe(true);
});

test('an episode that outgrows training.maxSeqLen fails the round by name at once (not retried, not scored)', async () => {
  const log = callsFile();
  // 16 prompt tokens and 18 more a turn: the fourth turn's prompt (70) + max_tokens (3) is over 64.
  const { input, taskQueue } = await game('env-long', 'kind: verifiers, name: vf_number_game, args: { turns: 6 }', log);
  input.spec.training.maxSeqLen = 64;
  const failed = await failedRound(input, taskQueue);
  expect(failed).toMatchObject({ status: 'failed', errorType: 'EnvironmentFailed', stepsApplied: 0 });
  expect(failed.errorMessage).toMatch(/EpisodeTooLong: turn \d: This model's maximum context length is 64 tokens \(training\.maxSeqLen\)/);
  // One attempt: the rubric scored each of the 12 episodes once (verifiers ends an overlong episode and scores it).
  expect(calls(log, 'episode').length).toBeGreaterThan(0);
  expect(calls(log, 'episode').length).toBeLessThanOrEqual(12);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

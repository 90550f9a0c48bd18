import { parseCampaignSpec } from '../../config/io/spec';
import { learningRateAt, batchRows, planSteps } from '../../config/rules/schedule';
import { earlyStopState } from '../../config/rules/early-stop';
import { nextDataCall, pythonChecksOf } from '../../config/rules/python-calls';
import { campaignPythonChecks, workerVariablesOf } from '../../config/rules/preflight';
import { specError, validSpec as valid } from '../helpers/spec-text';

describe('python functions in the spec', () => {
  const base = valid.replace('evaluation:\n  scorer: exact\n', '');
  const grpo = (reward: string) =>
    `${base}sampling: { maxTokens: 4, temperature: 1 }\nround: { kind: grpo, grpo: { reward: ${reward} } }\nevaluation: { scorer: exact }\n`.replace(
      'sampling:\n  maxTokens: 4\n',
      '',
    );

  test('a python reward, scorer and data policy parse with the call defaults filled in, and the checks list them', () => {
    const spec = parseCampaignSpec(
      grpo('{ kind: python, name: judge, taskQueue: rewards, retry: { maxAttempts: 3 } }')
        .replace('evaluation: { scorer: exact }', 'evaluation: { scorer: { kind: python, name: correct, taskQueue: rewards } }')
        .concat('rounds: { max: 2, nextData: { policy: python, name: hardest, taskQueue: policies, workerWaitSeconds: 5 } }\n'),
      'campaign.yaml',
    );
    expect(spec.round.grpo!.reward).toEqual({
      kind: 'python',
      name: 'judge',
      taskQueue: 'rewards',
      retry: { maxAttempts: 3, initialIntervalSeconds: 1, maxIntervalSeconds: 60, backoff: 2 },
      timeoutSeconds: 600,
      heartbeatTimeoutSeconds: 30,
      workerWaitSeconds: 120,
      concurrency: 8,
    });
    expect(pythonChecksOf(spec).map((c) => [c.field, c.role, c.call.name, c.call.taskQueue])).toEqual([
      ['round.grpo.reward', 'reward', 'judge', 'rewards'],
      ['evaluation.scorer', 'scorer', 'correct', 'rewards'],
    ]);
    expect(nextDataCall(spec.rounds.nextData)).toMatchObject({
      name: 'hardest',
      taskQueue: 'policies',
      workerWaitSeconds: 5,
      timeoutSeconds: 600,
    });
    // A built-in policy keeps exactly its fields (no python defaults leak into it).
    expect(parseCampaignSpec(valid, 'campaign.yaml').rounds.nextData).toEqual({ policy: 'mistakes', replayShare: 0.3 });
  });

  test('a python block missing its name or task queue, or python fields on a built-in policy, is named by field and line', () => {
    const noQueue = grpo('{ kind: python, name: judge }');
    expect(specError(noQueue).message).toMatch(/campaign\.yaml:\d+ round\.grpo\.reward\.taskQueue: /);
    const policy = `${valid}rounds: { max: 2, nextData: { policy: python, taskQueue: q } }\n`;
    expect(specError(policy).message).toMatch(/rounds\.nextData\.name: is required when policy is python/);
    const stray = `${valid}rounds: { max: 2, nextData: { policy: all, name: hardest } }\n`;
    expect(specError(stray).message).toMatch(/rounds\.nextData\.name: is only for policy: python/);
    const scorer = valid.replace('scorer: exact', 'scorer: { kind: python, name: s, taskQueue: q, concurrency: 0 }');
    expect(specError(scorer).message).toMatch(/evaluation\.scorer/);
  });
});

describe('what a campaign checks on its workers before its first round', () => {
  test("every stage's Python calls, labelled by stage: rewards, environments with their args, scorers, and a data policy only where a stage has a round after the first", () => {
    const spec = parseCampaignSpec(
      `${valid}stages:
  - name: warmup
    evaluation: { scorer: { kind: python, name: correct, taskQueue: scorers } }
    rounds: { max: 1, nextData: { policy: python, name: hardest, taskQueue: policies } }
  - name: rl
    sampling: { maxTokens: 3, temperature: 1 }
    round: { kind: grpo, grpo: { environment: { kind: verifiers, name: vf-game, taskQueue: envs, args: { turns: 2 } } } }
    rounds: { max: 2, nextData: { policy: python, name: hardest, taskQueue: policies } }
`,
      'campaign.yaml',
    );
    expect(campaignPythonChecks(spec).map((c) => [c.field, c.role, c.call.name, c.call.taskQueue, c.args])).toEqual([
      ['stage 1 (warmup): evaluation.scorer', 'scorer', 'correct', 'scorers', undefined],
      ['stage 2 (rl): round.grpo.environment', 'environment', 'verifiers:vf-game', 'envs', { turns: 2 }],
      ['stage 2 (rl): rounds.nextData', 'data_policy', 'hardest', 'policies', undefined],
    ]);
    // A campaign without stages: its own calls, unlabelled.
    const plain = parseCampaignSpec(valid.replace('scorer: exact', 'scorer: { kind: python, name: s, taskQueue: q }'), 'campaign.yaml');
    expect(campaignPythonChecks(plain).map((c) => c.field)).toEqual(['evaluation.scorer']);
  });

  test('the worker variables notify names: webhookEnv, and secretEnv only when the spec names it', () => {
    const withNotify = (notify: string) => parseCampaignSpec(`${valid}notify: ${notify}\n`, 'campaign.yaml');
    expect(workerVariablesOf(withNotify('{ webhook: "https://hooks.example/x" }'))).toEqual([]);
    expect(workerVariablesOf(withNotify('{ webhookEnv: HOOK_URL, secretEnv: HOOK_KEY }'))).toEqual([
      { field: 'notify.webhookEnv', name: 'HOOK_URL' },
      { field: 'notify.secretEnv', name: 'HOOK_KEY' },
    ]);
    expect(workerVariablesOf(parseCampaignSpec(valid, 'campaign.yaml'))).toEqual([]);
  });
});

describe('schedules and batches are pure functions of the step', () => {
  const schedule = { kind: 'cosine' as const, warmupSteps: 2, minRatio: 0.1 };
  test('warm-up rises linearly, cosine ends at the floor, and the same step always gives the same rate', () => {
    expect(learningRateAt(0, 10, 1, schedule)).toBeCloseTo(0.5);
    expect(learningRateAt(1, 10, 1, schedule)).toBeCloseTo(1);
    expect(learningRateAt(2, 10, 1, schedule)).toBeCloseTo(1);
    expect(learningRateAt(10, 10, 1, schedule)).toBeCloseTo(0.1);
    expect(learningRateAt(6, 10, 1, schedule)).toBe(learningRateAt(6, 10, 1, schedule));
    expect(learningRateAt(5, 10, 1, { kind: 'linear', warmupSteps: 0, minRatio: 0 })).toBeCloseTo(0.5);
    expect(learningRateAt(5, 10, 0.3, { kind: 'constant', warmupSteps: 0, minRatio: 0 })).toBe(0.3);
  });

  test('each epoch is a seeded permutation covering every row once', () => {
    expect(planSteps(20, 8, 2)).toEqual({ stepsPerEpoch: 3, totalSteps: 6 });
    const epoch0 = [0, 1, 2].flatMap((s) => batchRows(s, 20, 8, 7).rows);
    expect([...epoch0].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_v, i) => i));
    expect(batchRows(3, 20, 8, 7).epoch).toBe(1);
    expect(batchRows(3, 20, 8, 7).rows).not.toEqual(batchRows(0, 20, 8, 7).rows);
    expect(batchRows(4, 20, 8, 7)).toEqual(batchRows(4, 20, 8, 7));
  });
});

describe('early stopping is a pure function of the evaluation curve', () => {
  const curve = (losses: number[], metrics: (number | undefined)[] = []) =>
    losses.map((loss, i) => ({ step: (i + 1) * 10, loss, metric: metrics[i] }));
  test('the best is the lowest loss; patience counts the evaluations since it; minDelta ignores small gains', () => {
    const rule = { patience: 2, minDelta: 0, on: 'loss' as const };
    expect(earlyStopState(curve([3, 2, 2.5]), rule)).toMatchObject({ best: 20, sinceBest: 1, stop: false, improved: false });
    expect(earlyStopState(curve([3, 2, 2.5, 2.1]), rule)).toMatchObject({ best: 20, bestValue: 2, sinceBest: 2, stop: true });
    expect(earlyStopState(curve([3, 2, 2.5, 1.9]), rule)).toMatchObject({ best: 40, sinceBest: 0, stop: false, improved: true });
    expect(earlyStopState(curve([3, 2, 1.95, 1.94]), { ...rule, minDelta: 0.1 })).toMatchObject({ best: 20, stop: true });
  });
  test('on the metric, higher is better and unsampled passes do not count', () => {
    const rule = { patience: 2, minDelta: 0, on: 'metric' as const };
    const points = curve([3, 2, 1, 0.5, 0.4], [0.2, undefined, 0.5, undefined, 0.4]);
    expect(earlyStopState(points, rule)).toMatchObject({ best: 30, bestValue: 0.5, sinceBest: 1, stop: false });
    expect(earlyStopState([...points, { step: 60, loss: 0.3, metric: 0.5 }], rule)).toMatchObject({ best: 30, stop: true });
  });
});

import { groupCentred, policyDatums, type Advantages, type StepSamples } from '../../activities/policy-batch';

/** Two prompts of two completions: the first group's rewards differ, the second's tie. */
const samples: StepSamples = {
  step: 0,
  groups: [
    {
      line: 1,
      promptTokens: [10, 11],
      completions: [
        { tokens: [20, 21], logprobs: [-0.5, -0.25], text: 'a', reward: 1 },
        { tokens: [30], logprobs: [-1], text: 'b', reward: 0 },
        { tokens: [40], logprobs: [-2], text: 'c', reward: null },
      ],
    },
    {
      line: 2,
      promptTokens: [12],
      completions: [
        { tokens: [50], logprobs: [-1], text: 'd', reward: 1 },
        { tokens: [60], logprobs: [-1], text: 'e', reward: 1 },
      ],
    },
  ],
};

test("GRPO's group-centred advantages train the scored completions of groups that differ, on their sampled tokens only", async () => {
  const { datums, groupsKept } = await policyDatums(samples, groupCentred(false));
  expect(groupsKept).toBe(1);
  // The unscorable completion left its group (the mean is over 1 and 0); the tied group teaches nothing.
  expect(datums.map((d) => d.targetTokens)).toEqual([
    [11, 20, 21],
    [11, 30],
  ]);
  expect(datums[0]!.advantages).toEqual([0, 0.5, 0.5]);
  expect(datums[0]!.logprobs).toEqual([0, -0.5, -0.25]);
  expect(datums[1]!.advantages).toEqual([0, -0.5]);
});

test('an advantages step of its own gives each sampled token its advantage (a per-token signal such as distillation)', async () => {
  const perToken: Advantages = (groups) => groups.map((g) => g.completions.map((c) => c.logprobs.map((l) => -l)));
  const { datums, groupsKept } = await policyDatums(samples, perToken);
  expect(groupsKept).toBe(2);
  expect(datums.map((d) => d.advantages)).toEqual([[0, 0.5, 0.25], [0, 1], [1], [1]]);
});

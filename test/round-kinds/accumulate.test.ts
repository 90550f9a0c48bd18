import fs from 'node:fs';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// `training.accumulate`: N forward-backward passes of `batchSize` rows, then one optim_step. The trainer sums the
// passes' gradients, so a step of 2 passes of 8 rows is the step of one pass of 16: the same weights after training.
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 });
const report = (r: { reportPath: string }) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));

test.each([
  [
    'sft',
    'training: { epochs: 1, batchSize: BATCH, learningRate: 0.01, loraRank: 8, maxSeqLen: 64ACC }\nsampling: { maxTokens: 3 }\nevaluation: { scorer: numeric, sampleAnswers: false }',
    false,
  ],
  [
    'dpo',
    'training: { epochs: 1, batchSize: BATCH, learningRate: 0.005, loraRank: 8, maxSeqLen: 64ACC }\nsampling: { maxTokens: 3 }\nround: { kind: dpo, dpo: { beta: 0.5 } }',
    true,
  ],
] as const)('%s: 2 passes of 8 rows per step train the weights one pass of 16 does, in the same steps', async (kind, yaml, tickets) => {
  const run = async (batch: number, accumulate?: number) => {
    const taskQueue = uniqueTaskQueue(`acc-${kind}-${batch}`);
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `acc-${taskQueue}`,
      tickets,
      evaluation: kind === 'sft' ? '{ scorer: numeric, sampleAnswers: false }' : undefined,
      yaml: yaml
        .replace('BATCH', String(batch))
        .replace('ACC', accumulate ? `, accumulate: ${accumulate}` : '')
        .replace(/\nevaluation: .*/, ''),
    });
    const result = await runRound(input, taskQueue);
    const session = (await ledger(env.emulator)).sessions.find((s) => s.id === report(result).session_id)!;
    return { result, session };
  };
  const one = await run(16);
  const two = await run(8, 2);
  expect(two.result).toMatchObject({ status: 'completed', totalSteps: one.result.totalSteps, stepsApplied: one.result.totalSteps });
  expect(two.session).toMatchObject({ optimizerSteps: one.session.optimizerSteps, emptyOptimizerSteps: 0, tokens: one.session.tokens });
  console.log(`${kind} accumulate: trained loss ${one.result.trainedLoss} (16 rows a pass) vs ${two.result.trainedLoss} (2 × 8)`);
  expect(Math.abs(two.result.trainedLoss! - one.result.trainedLoss!)).toBeLessThan(1e-5);
  // The step records: the step's loss over its whole effective batch.
  const [a, b] = [report(one.result).steps, report(two.result).steps];
  expect(b.map((s: { step: number }) => s.step)).toEqual(a.map((s: { step: number }) => s.step));
  b.forEach((s: { loss: number; tokens: number }, i: number) => {
    expect(s.tokens).toBe(a[i].tokens);
    expect(Math.abs(s.loss - a[i].loss)).toBeLessThan(1e-4 * Math.max(1, Math.abs(a[i].loss)));
  });
});

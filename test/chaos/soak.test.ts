import { runSoak } from '../../bench/soak';
import { connectTestTemporal, type TestTemporal } from '../helpers/temporal';

// The short soak (`npm run soak` runs 100): randomized rounds of every kind and dialect under worker SIGKILLs,
// transport faults and provider faults, each checked against the emulator's ledger.
let temporal: TestTemporal;

beforeAll(async () => {
  temporal = await connectTestTemporal();
});

afterAll(async () => {
  await temporal?.close();
});

test('8 rounds, each kind on each dialect that has it (Tinker too), under randomized SIGKILLs, transport and provider faults: all complete with exact steps, none empty, nothing active', async () => {
  const f = await runSoak({
    client: temporal.client,
    temporalAddress: process.env.TEMPORAL_ADDRESS!,
    rounds: 8,
    seed: 4,
    cycleVariants: true,
    log: (line) => process.stderr.write(`[soak] ${line}\n`),
  });
  process.stderr.write(`[soak] ${JSON.stringify({ ...f, failures: f.failures.length })}\n`);
  expect(f.failures).toEqual([]);
  expect(f).toMatchObject({
    rounds: 8,
    completed: 8,
    stepsExact: 8,
    recordedOnce: 8,
    emptyStepsInKeptWeights: 0,
    resourcesLeftActive: 0,
  });
  expect(f.faultsInjected).toBeGreaterThan(0);
  // Every kill targeted a worker seen twice running a training attempt at the drawn heartbeat step. Timing decides
  // whether the kill lands inside it: a round whose training ended before its heartbeat showed step N gets none, and
  // an attempt that finished between the second look and the SIGKILL is not interrupted (on a loaded machine, with
  // four test files beside it). Both are reported, not failed; at least three kills must land in training (proven
  // by the server scheduling another attempt of the one killed).
  if (f.killsMissed.length) process.stderr.write(`[soak] drawn but not reached: ${f.killsMissed.join('; ')}\n`);
  const timing = /training ended before|it finished/;
  expect(f.killsMissed.filter((m) => !timing.test(m))).toHaveLength(0);
  expect(f.killsInTraining).toBeGreaterThanOrEqual(3);
  expect(f.workerKills).toBeGreaterThanOrEqual(f.killsInTraining);
}, 600_000);

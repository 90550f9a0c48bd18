import { ledger, raw, setFaults } from '../helpers/emulator';
import { roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// A round's requests must not grow with the account it runs on: at 1,000 rounds on one account, a round that listed
// every run before its create and again at its release paid for the whole account twice, and so did the emulator.
const KEY = 'bt-account-scale-key';
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, BASETEN_API_KEY: KEY });
const OTHER_RUNS = 40;

afterEach(async () => {
  await setFaults(env.emulator, {});
});

/** Rules that never fire (rate 0) but count the requests they match: `seen` in the faults report. */
const COUNTED = {
  runs: { method: 'GET', path: '^/v1/loops/runs$' },
  deployments: { method: 'GET', path: '^/v1/loops/deployments$' },
  samplers: { method: 'GET', path: '^/v1/loops/samplers$' },
  creates: { method: 'POST', path: '^/v1/loops/runs$' },
} as const;

async function counts(): Promise<Record<keyof typeof COUNTED, number>> {
  const report = (await (await fetch(`${env.emulator.url}/_emulator/faults`)).json()) as { fired: { seen: number }[] };
  const names = Object.keys(COUNTED) as (keyof typeof COUNTED)[];
  return Object.fromEntries(names.map((name, i) => [name, report.fired[i]!.seen])) as Record<keyof typeof COUNTED, number>;
}

test(`Baseten: with ${OTHER_RUNS} other runs active on the account, a round creates without listing the account, lists runs once (its own session's, at release), and leaves the others running`, async () => {
  const loops = (method: 'GET' | 'POST', path: string, body?: object) =>
    raw(env.emulator, method, path, { apiKey: KEY, scheme: 'Api-Key', body });
  const others: string[] = [];
  for (let i = 0; i < OTHER_RUNS; i++) {
    const session = await loops('POST', '/v1/loops/sessions');
    const run = await loops('POST', '/v1/loops/runs', {
      session_id: session.json.session.id,
      base_model: 'roundhouse/tiny-chat',
      name: `other-${i}`,
    });
    expect(run.status).toBe(200);
    others.push(run.json.run.id as string);
  }
  await setFaults(env.emulator, {
    rules: Object.values(COUNTED).map((match) => ({ kind: 'delay', delayMs: 0, rate: 0, max: 100_000, ...match })),
  });

  const taskQueue = uniqueTaskQueue('account-scale');
  const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `account-scale-${taskQueue}`, trainRows: 8, evalRows: 2 });
  input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: env.emulator.url };
  input.spec.training.epochs = 1;
  const result = await runRound(input, taskQueue);
  expect(result.status).toBe('completed');

  const seen = await counts();
  process.stderr.write(`[account-scale] requests of one round: ${JSON.stringify(seen)}\n`);
  expect(seen.creates).toBe(1);
  expect(seen.deployments).toBe(0); // listed with every run before each create, until the tag was trusted alone
  expect(seen.runs).toBe(1); // the release's listing of its own session (was 3: two of them the whole account)
  expect(seen.samplers).toBe(1); // strays of the session: the service has no sampler filter, so this one stays

  // The round's run is released; the account's other runs are untouched.
  const book = await ledger(env.emulator);
  expect(book.active.sort()).toEqual([...others].sort());
  for (const id of others) await loops('POST', `/v1/loops/runs/${id}/deactivate`);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

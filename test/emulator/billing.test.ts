import type { Ledger } from '../../emulator/engine';
import type { Datum } from '../../providers/types';
import { ledger, startTestEmulator, tinkerProvider, togetherProvider, type RunningEmulator } from '../helpers/emulator';

/**
 * The emulator bills dollars (docs/design/budget.md): a Together resource its GPU-seconds at the per-GPU-hour price
 * (the price estimate-cost quotes), a Tinker session its tokens at the model's prices per million, and the totals both.
 * The `prices` option overrides every model's prices. Everything goes over HTTP, through the providers' clients.
 */

const MODEL = 'Qwen/Qwen3-8B';
const GPUS = 8; // what a resource of MODEL holds (emulator/models.ts)
const HELD_MS = 1000;

const CASES = [
  {
    name: "the model's own prices (2.99 USD per GPU-hour; Tinker's list price 0.13 / 0.40 / 0.40 per million tokens)",
    options: {},
    gpuHour: 2.99,
    tokens: { prefill: 0.13, sample: 0.4, train: 0.4 },
  },
  {
    name: 'the prices option (a dollar a GPU-second)',
    options: { prices: { gpuHour: 3600, tokens: { prefill: 1000, sample: 2000, train: 3000 } } },
    gpuHour: 3600,
    tokens: { prefill: 1000, sample: 2000, train: 3000 },
  },
];

/** The ledger bills to the millionth of a dollar: the exact figure, within half of that. */
function expectDollars(billed: number, exact: number): void {
  expect(Math.abs(billed - exact)).toBeLessThanOrEqual(0.5e-6 + 1e-12);
}

const tokens = Array.from({ length: 33 }, (_v, i) => 1000 + i * 37);
const batch: Datum[] = Array.from({ length: 4 }, () => ({
  modelInput: tokens.slice(0, -1),
  targetTokens: tokens.slice(1),
  weights: tokens.slice(1).map(() => 1),
}));

/** A Together resource held about a second, with two sessions that each train a batch; and the price quoted before. */
async function holdTogetherResource(emulator: RunningEmulator): Promise<{ id: string; quotedPerHour: number }> {
  const provider = togetherProvider(emulator);
  try {
    const quote = await provider.estimateCost(MODEL);
    const resource = await provider.provision({ model: MODEL, ownerTag: 'billing-together' });
    await provider.waitReady(resource.id, { pollIntervalMs: 10 });
    const started = Date.now();
    for (const name of ['first', 'second']) {
      const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 1 });
      await provider.awaitOperation(await provider.submitForwardBackward(session.id, `${name}/fb`, batch));
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, HELD_MS - (Date.now() - started))));
    await provider.deactivate(resource.id);
    return { id: resource.id, quotedPerHour: quote.pricePerHour };
  } finally {
    await provider.close();
  }
}

/** A Tinker model that trains a batch, evaluates it forward-only and samples: all three token kinds. Its session's id. */
async function trainOnTinker(emulator: RunningEmulator): Promise<string> {
  const provider = tinkerProvider(emulator);
  try {
    const resource = await provider.provision({ model: MODEL, ownerTag: 'billing-tinker' });
    const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 1 });
    await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'train', batch));
    await provider.awaitOperation(await provider.submitForwardBackward(session.id, 'eval', batch, { forwardOnly: true }));
    const prompt = tokens.slice(0, 8);
    await provider.awaitOperation(await provider.submitSample(session.id, 'sample', [prompt], { maxTokens: 8, temperature: 1, seed: 1 }));
    await provider.deactivate(resource.id);
    return session.id;
  } finally {
    await provider.close();
  }
}

describe.each(CASES)('billed at $name', ({ options, gpuHour, tokens: prices }) => {
  let emulator: RunningEmulator;
  let book: Ledger;
  let together: { id: string; quotedPerHour: number };
  let tinkerSessionId: string;

  beforeAll(async () => {
    emulator = await startTestEmulator(options);
    [together, tinkerSessionId] = await Promise.all([holdTogetherResource(emulator), trainOnTinker(emulator)]);
    book = await ledger(emulator);
  });

  afterAll(async () => {
    await emulator.close();
  });

  test('a Together resource held about a second bills its GPU-seconds at the per-GPU-hour price, the price estimate-cost quotes', () => {
    expectDollars(together.quotedPerHour, GPUS * gpuHour);
    const r = book.resources.find((x) => x.id === together.id)!;
    expect(r.gpuSeconds).toBeGreaterThanOrEqual((GPUS * HELD_MS * 0.9) / 1000); // per GPU: 8 GPUs for about a second
    expectDollars(r.usd, (r.gpuSeconds / 3600) * gpuHour);
    expectDollars(r.usd, (r.gpuSeconds / GPUS / 3600) * together.quotedPerHour);
  });

  test("the Together resource's two sessions count their tokens but bill nothing: the resource is billed once, by GPU time", () => {
    const sessions = book.sessions.filter((s) => s.resourceId === together.id);
    expect(sessions).toHaveLength(2);
    for (const s of sessions) {
      expect(s.tokens.train).toBe(4 * 32);
      expect(s.usd).toBe(0);
    }
  });

  test("a Tinker session bills its tokens at the model's prices per million; its model bills no GPU time", () => {
    const s = book.sessions.find((x) => x.id === tinkerSessionId)!;
    expect(s.tokens).toMatchObject({ prefill: 4 * 32 + 8, train: 4 * 32 });
    expect(s.tokens.sample).toBeGreaterThan(0);
    const exact = (s.tokens.prefill * prices.prefill + s.tokens.sample * prices.sample + s.tokens.train * prices.train) / 1e6;
    expectDollars(s.usd, exact);
    expect(book.resources.find((r) => r.id === s.resourceId)).toMatchObject({ dialect: 'tinker', gpuSeconds: 0, usd: 0 });
  });

  test("totals.usd is the resources' dollars and the sessions' summed; every figure is to the millionth", () => {
    const resources = book.resources.reduce((a, r) => a + r.usd, 0);
    const sessions = book.sessions.reduce((a, s) => a + s.usd, 0);
    expect(resources).toBeGreaterThan(0);
    expect(sessions).toBeGreaterThan(0);
    expectDollars(book.totals.usd, resources + sessions);
    for (const usd of [book.totals.usd, ...book.resources.map((r) => r.usd), ...book.sessions.map((s) => s.usd)])
      expect(Math.round(usd * 1e6) / 1e6).toBe(usd);
  });
});

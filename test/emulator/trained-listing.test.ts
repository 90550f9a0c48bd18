import { raw, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import type { TrainedListing } from '../../emulator/engine';

// GET /_emulator/trained: what the trainer received in each training pass, opt-in and bounded per session.
const key = 'trained-listing-key';
const f32 = (data: number[]) => ({ data, dtype: 'float32' });
const i64 = (data: number[]) => ({ data, dtype: 'int64' });

async function session(emulator: RunningEmulator): Promise<string> {
  const resource = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'roundhouse/tiny-chat' } });
  const created = await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey: key, body: { model_resources_id: resource.json.id } });
  expect(created.status).toBe(200);
  return `/v1/rl/training-sessions/${created.json.id}`;
}

/** A forward-backward (forward-only or not) of one sequence `[first, first+1, first+2, first+3]`, awaited. */
async function pass(emulator: RunningEmulator, path: string, idempotencyKey: string, first: number, forwardOnly = false): Promise<void> {
  const tokens = [first, first + 1, first + 2];
  const posted = await raw(emulator, 'POST', `${path}/operations/forward-backward`, {
    apiKey: key,
    idempotencyKey,
    body: {
      loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' },
      samples: [
        {
          model_input: { chunks: [{ encoded_text: { tokens } }] },
          loss_fn_inputs: { target_tokens: i64(tokens.map((t) => t + 1)), weights: f32([0, 1, 1]) },
        },
      ],
      forward_only: forwardOnly,
    },
  });
  expect(posted.status).toBe(200);
  for (let i = 0; i < 2000; i++) {
    const res = await raw(emulator, 'GET', `${path}/operations/forward-backward/${posted.json.id}`, { apiKey: key });
    if (String(res.json.status).endsWith('COMPLETED')) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the forward-backward did not complete');
}

const listing = async (emulator: RunningEmulator) => (await raw(emulator, 'GET', '/_emulator/trained')).json as TrainedListing;

test('each session keeps its last trainedBatches training passes: keys, tokens and weights as sent; forward-only passes are not training', async () => {
  const emulator = await startTestEmulator({ trainedBatches: 2 });
  try {
    const path = await session(emulator);
    await pass(emulator, path, 'k1', 5);
    await pass(emulator, path, 'k2', 9);
    await pass(emulator, path, 'fwd', 20, true);
    await pass(emulator, path, 'k3', 13);
    await pass(emulator, path, 'k3', 13); // a duplicate: absorbed, not trained twice
    const [only] = (await listing(emulator)).sessions;
    expect(only!.batches.map((b) => b.key)).toEqual(['k2', 'k3']);
    expect(only!.batches[1]!.datums).toEqual([{ inputTokens: [13, 14, 15], targetTokens: [14, 15, 16], weights: [0, 1, 1] }]);
  } finally {
    await emulator.close();
  }
});

test('off by default: nothing is kept', async () => {
  const emulator = await startTestEmulator();
  try {
    await pass(emulator, await session(emulator), 'k1', 5);
    expect((await listing(emulator)).sessions).toEqual([]);
  } finally {
    await emulator.close();
  }
});

import protobuf from 'protobufjs';
import { TINKER_PROTO } from '../../emulator/tinker/schema';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

/**
 * The emulator's Tinker dialect at the wire (providers/tinker/WIRE.md), where the SDK test does not reach: the key
 * check, operations that arrive out of seq_id order (the SDK sends a chunked forward_backward's first chunk last), a
 * resent seq_id, the long poll's 408, and a finished session.
 */
const ForwardBackwardRequest = protobuf.parse(TINKER_PROTO, { keepCase: true }).root.lookupType('tinker_public.ForwardBackwardRequest');

let emulator: RunningEmulator;
const key = `tml-wire-${Date.now()}`;

beforeAll(async () => {
  emulator = await startTestEmulator({ tinkerFutureHoldMs: 300, operationLatencyMs: 100 });
});

afterAll(async () => {
  await emulator.close();
});

async function call(path: string, body: object | Uint8Array, headers: Record<string, string> = {}) {
  const binary = body instanceof Uint8Array;
  const res = await fetch(`${emulator.url}/api/v1${path}`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': binary ? 'application/x-protobuf' : 'application/json', ...headers },
    body: binary ? body : JSON.stringify(body),
  });
  const type = res.headers.get('content-type') ?? '';
  return { status: res.status, type, json: type.includes('json') ? ((await res.json()) as any) : undefined };
}

/** Polls a future to its end (408 is "ask again"), counting the 408s. */
async function settle(requestId: string) {
  let pending = 0;
  for (let i = 0; i < 100; i++) {
    const r = await call('/retrieve_future', { request_id: requestId, allow_metadata_only: true });
    if (r.status !== 408) return { ...r, pending };
    expect(r.json).toEqual({ type: 'try_again', request_id: requestId, queue_state: 'active' });
    pending++;
  }
  throw new Error(`future ${requestId} never settled`);
}

function forwardBackward(modelId: string, seqId: number): Uint8Array {
  const le = (values: number[], width: 4 | 8) => {
    const b = Buffer.alloc(values.length * width);
    values.forEach((v, i) => (width === 4 ? b.writeInt32LE(v, i * 4) : b.writeBigInt64LE(BigInt(v), i * 8)));
    return b;
  };
  const weights = Buffer.alloc(12);
  [0, 1, 1].forEach((v, i) => weights.writeFloatLE(v, i * 4));
  return ForwardBackwardRequest.encode(
    ForwardBackwardRequest.fromObject({
      model_id: modelId,
      seq_id: seqId,
      loss_fn: 'cross_entropy',
      data: [
        {
          model_input: [{ encoded_text: { tokens: le([1, 40, 41], 4) } }],
          loss_fn_inputs: {
            target_tokens: { dense: le([40, 41, 42], 8), dtype: 2, shape: [3] },
            weights: { dense: weights, dtype: 1, shape: [3] },
          },
        },
      ],
    }),
  ).finish();
}

test('a key that is not tml-… is refused; /client/config answers the defaults', async () => {
  const refused = await call('/create_session', {}, { 'x-api-key': 'sk-not-tinker' });
  expect(refused.status).toBe(401);
  expect((await call('/client/config', { sdk_version: '0.38.0' })).json).toEqual({});
});

test('operations run in seq_id order: an optim_step sent before its forward_backward waits for it; a resent seq_id is the same future; a finished session unloads its model', async () => {
  const session = (await call('/create_session', { tags: [], user_metadata: {}, type: 'create_session' })).json.session_id as string;
  const created = await call('/create_model', {
    session_id: session,
    model_seq_id: 0,
    base_model: 'roundhouse/tiny-chat',
    lora_config: { rank: 4 },
  });
  expect(created.json.model_id).toBe(`${session}:train:0`);
  expect((await settle(created.json.request_id)).json).toEqual({ model_id: `${session}:train:0`, type: 'create_model' });
  const modelId = created.json.model_id as string;

  // seq 2 first: it is held until seq 1 arrives, then both run, in order.
  const optim = await call('/optim_step', { model_id: modelId, seq_id: 2, adam_params: { learning_rate: 0.01 }, type: 'optim_step' });
  const early = await call('/retrieve_future', { request_id: optim.json.request_id, allow_metadata_only: true });
  expect(early.status).toBe(408); // nothing can run before seq 1
  const fb = await call('/forward_backward', forwardBackward(modelId, 1));
  const resent = await call('/forward_backward', forwardBackward(modelId, 1));
  expect(resent.json.request_id).toBe(fb.json.request_id);

  const fbResult = await settle(fb.json.request_id);
  expect(fbResult.status).toBe(200);
  expect(fbResult.type).toContain('application/x-protobuf');
  const optimResult = await settle(optim.json.request_id);
  expect(optimResult.json).toMatchObject({ type: 'optim_step', metrics: { 'step:max': 1 } });

  let book = await ledger(emulator);
  const s = book.sessions.find((x) => x.resourceId === modelId)!;
  expect(s.optimizerSteps).toBe(1); // once, though seq 1 was sent twice
  expect(s.emptyOptimizerSteps).toBe(0); // and after the gradients it was sent behind
  expect(book.active).toContain(modelId);

  expect((await call(`/sessions/${session}/finish`, { reason: { type: 'success' }, detail: null })).status).toBe(200);
  expect((await call('/session_heartbeat', { session_id: session, type: 'session_heartbeat' })).status).toBe(410);
  book = await ledger(emulator);
  expect(book.active).not.toContain(modelId);
});

test("a checkpoint TTL under an hour is refused (400 naming ttl_seconds); a valid one is recorded and listed as the checkpoint's expires_at; none never expires", async () => {
  const session = (await call('/create_session', { tags: [], user_metadata: {}, type: 'create_session' })).json.session_id as string;
  const created = await call('/create_model', {
    session_id: session,
    model_seq_id: 0,
    base_model: 'roundhouse/tiny-chat',
    lora_config: { rank: 4 },
  });
  await settle(created.json.request_id);
  const modelId = created.json.model_id as string;

  for (const [route, body] of [
    ['/save_weights', { path: 'short' }],
    ['/save_weights_for_sampler', { path: 'short-sampler' }],
  ] as const) {
    const refused = await call(route, { model_id: modelId, seq_id: 1, ...body, ttl_seconds: 60, type: route.slice(1) });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.json)).toMatch(/ttl_seconds.*3600/);
  }
  // The refused saves took no seq_id: the next save is seq 1.
  const kept = await call('/save_weights', { model_id: modelId, seq_id: 1, path: 'kept', ttl_seconds: 7200, type: 'save_weights' });
  expect((await settle(kept.json.request_id)).json).toMatchObject({ path: `tinker://${modelId}/weights/kept` });
  const forever = await call('/save_weights_for_sampler', {
    model_id: modelId,
    seq_id: 2,
    path: 'forever',
    type: 'save_weights_for_sampler',
  });
  await settle(forever.json.request_id);

  const res = await fetch(`${emulator.url}/api/v1/training_runs/${encodeURIComponent(modelId)}/checkpoints`, {
    headers: { 'x-api-key': key },
  });
  const { checkpoints } = (await res.json()) as { checkpoints: { checkpoint_id: string; time: string; expires_at: string | null }[] };
  const byId = Object.fromEntries(checkpoints.map((c) => [c.checkpoint_id, c]));
  expect(Date.parse(byId['weights/kept']!.expires_at!) - Date.parse(byId['weights/kept']!.time)).toBe(7200 * 1000);
  expect(byId['sampler_weights/forever']!.expires_at).toBeNull();
});

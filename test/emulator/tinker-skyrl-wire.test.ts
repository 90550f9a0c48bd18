import { request } from 'undici';
import { decodeForwardBackwardOutput, decodeSampleResponse, encodeForwardBackward } from '../../providers/tinker/wire';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

/**
 * The emulator's `skyrl` Tinker flavour answers as SkyRL 0.4.0's server did when it was captured
 * (scripts/conformance/skyrl/FINDINGS.md, whose bodies these assertions quote): raw HTTP, no client of ours.
 */

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator({ tinkerFlavor: 'skyrl', tinkerSessionTtlMs: 600 });
});

afterAll(async () => {
  await emulator.close();
});

async function call(path: string, body?: object | Uint8Array, key = 'any-key-at-all') {
  const proto = body instanceof Uint8Array;
  const res = await request(`${emulator.url}/api/v1${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'x-api-key': key, 'content-type': proto ? 'application/x-protobuf' : 'application/json' },
    body: proto ? Buffer.from(body) : body === undefined ? undefined : JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  const json = /json/.test(String(res.headers['content-type'])) && bytes.length ? JSON.parse(bytes.toString('utf8')) : undefined;
  return { status: res.statusCode, json, bytes };
}

const settle = (id: string) => call('/retrieve_future', { request_id: id, allow_metadata_only: false });

async function modelOf(session: string, rank = 8) {
  const created = await call('/create_model', { session_id: session, model_seq_id: 0, base_model: 'Qwen/Qwen3-8B', lora_config: { rank } });
  return { created, result: await settle(created.json.request_id) };
}

test('sessions: random ids, no session routes, expiry only after a first heartbeat, with the models', async () => {
  const s = await call('/create_session', { tags: ['roundhouse'], user_metadata: { roundhouse_owner: 'x' }, sdk_version: '0.38.0' });
  expect(s.json).toEqual({
    type: 'create_session',
    info_message: null,
    warning_message: null,
    error_message: null,
    session_id: expect.stringMatching(/^session_[0-9a-f]{8}$/),
  });
  const session = s.json.session_id as string;
  for (const [path, body] of [
    ['/sessions/search', { limit: 1 }],
    [`/sessions/${session}`, undefined],
    [`/sessions/${session}/finish`, {}],
  ] as const)
    expect(await call(path, body)).toMatchObject({ status: 404, json: { detail: 'Not Found' } });
  expect(await call('/session_heartbeat', { session_id: 'session_00000000' })).toMatchObject({
    status: 404,
    json: { detail: 'Session not found' },
  });

  const silent = (await modelOf(session)).created.json.model_id as string; // never heartbeated: never expires
  const beaten = await call('/create_session', {});
  const lapsing = (await modelOf(beaten.json.session_id)).created.json.model_id as string;
  expect(await call('/session_heartbeat', { session_id: beaten.json.session_id })).toMatchObject({
    status: 200,
    json: { type: 'session_heartbeat' },
  });
  await new Promise((r) => setTimeout(r, 1_200));
  const active = (await ledger(emulator)).active;
  expect(active).toContain(silent);
  expect(active).not.toContain(lapsing);
  expect(await call('/session_heartbeat', { session_id: beaten.json.session_id })).toMatchObject({ status: 200 }); // revives nothing
  expect((await call('/get_info', { model_id: lapsing })).json).toMatchObject({ status: 'unloaded' });
  const fb = await call(
    '/forward_backward',
    encodeForwardBackward({
      modelId: lapsing,
      seqId: 1,
      lossFn: 'cross_entropy',
      data: [{ tokens: [1, 2], targetTokens: [2, 3], floats: { weights: [1, 1] } }],
    }),
  );
  expect(await settle(fb.json.request_id)).toMatchObject({ status: 400, json: { detail: `Model ${lapsing} not loaded` } });
  await call('/unload_model', { model_id: silent, type: 'unload_model' }).then((u) => settle(u.json.request_id));
});

test('models: ids as answered, creates not deduplicated, failures as HTTP 400 detail, no loss:sum, FastAPI 422s, 409 on a save resent, load only first', async () => {
  const session = (await call('/create_session', {})).json.session_id as string;
  const { created, result } = await modelOf(session);
  expect(created.json).toMatchObject({
    model_id: expect.stringMatching(/^model_[0-9a-f]{8}$/),
    status: 'created',
    request_id: expect.stringMatching(/^\d+$/),
  });
  expect(result.json).toMatchObject({ model_id: created.json.model_id, lora_config: { rank: 8, alpha: 32 } });
  const model = created.json.model_id as string;
  const again = await modelOf(session); // the same (session, model_seq_id) again: a second model
  expect(again.created.json.model_id).not.toBe(model);
  expect(await settle((await modelOf(session, 64)).created.json.request_id)).toMatchObject({
    status: 400,
    json: { detail: 'LoRA rank 64 must be between 1 and 32' },
  });
  const runs = (await call('/training_runs?limit=100')).json.training_runs as { training_run_id: string; user_metadata: unknown }[];
  expect(runs.find((r) => r.training_run_id === model)).toMatchObject({ user_metadata: null, model_owner: 'default' });

  const fb = encodeForwardBackward({
    modelId: model,
    seqId: 1,
    lossFn: 'cross_entropy',
    data: [{ tokens: [10, 11, 12], targetTokens: [11, 12, 40], floats: { weights: [0, 1, 2] } }],
  });
  const submitted = await call('/forward_backward', fb);
  expect((await call('/forward_backward', fb)).json.request_id).toBe(submitted.json.request_id); // same seq, same body
  const out = decodeForwardBackwardOutput((await settle(submitted.json.request_id)).bytes);
  expect(out.metrics).toEqual({});
  const { logprobs, elementwise_loss: loss } = out.outputs[0]!;
  expect(loss!.map((v, k) => v + [0, 1, 2][k]! * logprobs![k]!)).toEqual([0, 0, 0].map(() => expect.closeTo(0, 5)));
  expect((await call('/optim_step', { model_id: model, seq_id: 1, adam_params: { learning_rate: 0.1 } })).status).toBe(409); // seq reused
  const opt = await call('/optim_step', {
    model_id: model,
    seq_id: 2,
    adam_params: { learning_rate: 0.01, beta1: 0.9, beta2: 0.95, eps: 1e-8 },
  });
  expect((await settle(opt.json.request_id)).json.metrics).toHaveProperty(['skyrl.ai/grad_norm']);

  expect(await call('/save_weights', { model_id: model, path: 'tickets-v1.2-ab12cd34-st1', seq_id: 3 })).toMatchObject({
    status: 422,
    json: { detail: [{ type: 'string_pattern_mismatch', loc: ['body', 'path'], input: 'tickets-v1.2-ab12cd34-st1' }] },
  });
  const save = await call('/save_weights', { model_id: model, path: 'ckpt-st1', seq_id: 3 });
  expect((await settle(save.json.request_id)).json).toEqual({ path: `tinker://${model}/weights/ckpt-st1`, type: 'save_weights' });
  expect(await call('/save_weights', { model_id: model, path: 'ckpt-st1', seq_id: 3 })).toMatchObject({
    status: 409,
    json: { detail: `Checkpoint 'ckpt-st1' already exists for model '${model}'` },
  });
  const sampler = await call('/save_weights_for_sampler', { model_id: model, path: 'sampler-st1', seq_id: 4 });
  expect((await settle(sampler.json.request_id)).json).toMatchObject({ path: `tinker://${model}/sampler-st1` }); // no sampler_weights/
  expect((await call(`/training_runs/${model}/checkpoints`)).json.checkpoints.map((c: { tinker_path: string }) => c.tinker_path)).toEqual([
    `tinker://${model}/weights/ckpt-st1`,
    `tinker://${model}/sampler_weights/sampler-st1`,
  ]);

  const checkpoint = `tinker://${model}/weights/ckpt-st1`;
  expect(await call('/load_weights', { session_id: session, model_seq_id: 3, path: checkpoint, optimizer: true })).toMatchObject({
    status: 422,
    json: { detail: [{ type: 'missing', loc: ['body', 'model_id'], msg: 'Field required' }] },
  });
  const fresh = (await modelOf(session)).created.json.model_id as string;
  const load = await call('/load_weights', { model_id: fresh, seq_id: 1, path: checkpoint, optimizer: true, type: 'load_weights' });
  expect((await settle(load.json.request_id)).json).toEqual({ type: 'load_weights' });
  expect(await call('/load_weights', { model_id: fresh, seq_id: 1, path: checkpoint, optimizer: true })).toMatchObject({
    status: 400,
    json: { detail: 'LoadWeights is not permitted with seq_id 1' },
  });

  const ss = await call('/create_sampling_session', {
    session_id: session,
    sampling_session_seq_id: 0,
    model_path: `tinker://${model}/sampler-st1`,
  });
  const sample = await call('/asample', {
    sampling_session_id: ss.json.sampling_session_id,
    seq_id: 0,
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: [10, 11, 12, 13] }] },
    sampling_params: { max_tokens: 2, temperature: 0 },
    prompt_logprobs: true,
  });
  expect(sample.json).not.toHaveProperty('sample_sequence_ids');
  const prompt = decodeSampleResponse((await settle(sample.json.request_id)).bytes).promptLogprobs!;
  expect(prompt).toHaveLength(3); // one short, no leading NaN
  expect(prompt.every((v) => v !== null)).toBe(true);
});

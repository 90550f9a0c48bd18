import { raw, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

let emulator: RunningEmulator;
let sessionPath: string;
const key = 'bad-requests-key';

const sample = (tokens: number[], targets: unknown, weights: unknown = { data: tokens.map(() => 1), dtype: 'float32' }) => ({
  model_input: { chunks: [{ encoded_text: { tokens } }] },
  loss_fn_inputs: { target_tokens: targets, weights },
});

beforeAll(async () => {
  emulator = await startTestEmulator();
  const resource = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'roundhouse/tiny-chat' } });
  const session = await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey: key, body: { model_resources_id: resource.json.id } });
  sessionPath = `/v1/rl/training-sessions/${session.json.id}`;
});

afterAll(async () => {
  await emulator.close();
});

function expectError(res: { status: number; json: any }, status: number, message: RegExp): void {
  expect(res.status).toBe(status);
  expect(res.json).toEqual({ error: { message: expect.stringMatching(message), code: expect.any(String) } });
}

describe('bad requests get the status and JSON error body the service gives, never a crash', () => {
  test('malformed JSON', async () => {
    const res = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: '{"base_model": ' });
    expectError(res, 400, /malformed JSON/);
  });

  test('a missing or malformed Authorization header is 401', async () => {
    expectError(await raw(emulator, 'GET', '/v1/rl/model-resources', { apiKey: null }), 401, /Authorization/);
  });

  test('an unsupported base model names the field', async () => {
    expectError(
      await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'nope/nope' } }),
      400,
      /base_model 'nope\/nope' is not supported/,
    );
    expectError(await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { compute_config: {} } }), 400, /base_model/);
  });

  test('unknown ids are 404', async () => {
    expectError(await raw(emulator, 'GET', '/v1/rl/model-resources/mr-unknown', { apiKey: key }), 404, /mr-unknown not found/);
    expectError(await raw(emulator, 'GET', '/v1/rl/training-sessions/sess-unknown', { apiKey: key }), 404, /not found/);
    expectError(
      await raw(emulator, 'GET', `${sessionPath}/operations/optim-step/00000000-0000-0000-0000-000000000000`, { apiKey: key }),
      404,
      /not found/,
    );
    expectError(await raw(emulator, 'GET', '/v1/rl/checkpoints/ckpt-unknown', { apiKey: key }), 404, /not found/);
    expectError(await raw(emulator, 'GET', '/v1/rl/nothing-here', { apiKey: key }), 404, /no route/);
  });

  test("another account's resources are invisible (404), not shared", async () => {
    const mine = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'roundhouse/tiny-chat' } });
    expectError(await raw(emulator, 'GET', `/v1/rl/model-resources/${mine.json.id}`, { apiKey: 'someone-else' }), 404, /not found/);
  });

  test('an operation without an Idempotency-Key is refused', async () => {
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/optim-step`, { apiKey: key, body: {} }),
      400,
      /Idempotency-Key header is required/,
    );
  });

  test('wrong dtypes are refused with the field named', async () => {
    const body = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 2, 3], { data: [2, 3, 4], dtype: 'float32' })] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, { apiKey: key, idempotencyKey: 'd1', body }),
      400,
      /target_tokens: dtype must be int64/,
    );
    const body2 = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 2, 3], { data: [2, 3, 4], dtype: 'bfloat99' })] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, { apiKey: key, idempotencyKey: 'd2', body: body2 }),
      400,
      /dtype/,
    );
    const body3 = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 2, 3], { data: [2, 3.5, 4], dtype: 'int64' })] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, { apiKey: key, idempotencyKey: 'd3', body: body3 }),
      400,
      /non-integer/,
    );
  });

  test('mismatched tensor lengths are refused with both lengths named', async () => {
    const body = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 2, 3], { data: [2, 3], dtype: 'int64' })] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, { apiKey: key, idempotencyKey: 'm1', body }),
      400,
      /target_tokens has 2 values but model_input has 3 tokens/,
    );
    const body2 = { samples: [sample([1, 2, 3], { data: [2, 3, 4], dtype: 'int64' })], gradients: [{ data: [0.1] }] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/custom-forward-backward`, { apiKey: key, idempotencyKey: 'm2', body: body2 }),
      400,
      /gradients\[0\] has 1 values/,
    );
  });

  test('token ids outside the vocabulary are refused; weights and mask together are refused', async () => {
    const body = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 2, 99999], { data: [2, 3, 4], dtype: 'int64' })] };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, { apiKey: key, idempotencyKey: 'v1', body }),
      400,
      /outside the vocabulary/,
    );
    const both = sample([1, 2], { data: [2, 3], dtype: 'int64' });
    (both.loss_fn_inputs as Record<string, unknown>).mask = { data: [1, 1], dtype: 'int64' };
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/forward-backward`, {
        apiKey: key,
        idempotencyKey: 'v2',
        body: { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [both] },
      }),
      400,
      /weights and mask cannot both be present/,
    );
  });

  test('an unknown operation kind is 404 and a wrong method is 405', async () => {
    expectError(
      await raw(emulator, 'POST', `${sessionPath}/operations/teleport`, { apiKey: key, idempotencyKey: 'x', body: {} }),
      404,
      /unknown operation kind/,
    );
    expectError(await raw(emulator, 'PATCH', '/v1/rl/model-resources', { apiKey: key, body: {} }), 405, /not allowed/);
  });

  test('polling an operation under the wrong kind is 404 (the kind is part of the path)', async () => {
    const op = await raw(emulator, 'POST', `${sessionPath}/operations/optim-step`, { apiKey: key, idempotencyKey: 'kind-check', body: {} });
    expect(op.status).toBe(200);
    expectError(await raw(emulator, 'GET', `${sessionPath}/operations/sample/${op.json.id}`, { apiKey: key }), 404, /not found/);
    const good = await raw(emulator, 'GET', `${sessionPath}/operations/optim-step/${op.json.id}`, { apiKey: key });
    expect(good.status).toBe(200);
  });

  test('a bad list limit or cursor is 400', async () => {
    expectError(await raw(emulator, 'GET', '/v1/rl/model-resources?limit=0', { apiKey: key }), 400, /limit/);
    expectError(await raw(emulator, 'GET', '/v1/rl/model-resources?after=nope', { apiKey: key }), 400, /cursor/);
  });

  test('the session cap answers 429; stopping a resource with live sessions needs force', async () => {
    const r = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'roundhouse/tiny-chat' } });
    for (let i = 0; i < 5; i++) {
      expect(
        (await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey: key, body: { model_resources_id: r.json.id } })).status,
      ).toBe(200);
    }
    expectError(
      await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey: key, body: { model_resources_id: r.json.id } }),
      429,
      /limit 5/,
    );
    expectError(await raw(emulator, 'POST', `/v1/rl/model-resources/${r.json.id}/stop`, { apiKey: key }), 400, /force=true/);
    const forced = await raw(emulator, 'POST', `/v1/rl/model-resources/${r.json.id}/stop?force=true`, { apiKey: key });
    expect(forced.status).toBe(200);
    expect(forced.json.status).toMatch(/STOPP(ING|ED)/);
    expectError(await raw(emulator, 'POST', `/v1/rl/model-resources/${r.json.id}/stop`, { apiKey: key }), 400, /already stopp/);
  });

  test('lists paginate with a cursor, newest first, filtered by comma-joined statuses', async () => {
    const k = 'pagination-key';
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push(
        (await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: k, body: { base_model: 'roundhouse/tiny-chat' } })).json.id,
      );
      await new Promise((r) => setTimeout(r, 3));
    }
    await raw(emulator, 'POST', `/v1/rl/model-resources/${ids[0]}/stop`, { apiKey: k });
    const first = await raw(emulator, 'GET', '/v1/rl/model-resources?created_by=me&limit=2', { apiKey: k });
    expect(first.json.data.map((r: { id: string }) => r.id)).toEqual([ids[2], ids[1]]);
    expect(first.json.meta).toEqual({ has_more: true, limit: 2, next_cursor: ids[1] });
    const second = await raw(emulator, 'GET', `/v1/rl/model-resources?created_by=me&limit=2&after=${ids[1]}`, { apiKey: k });
    expect(second.json.data.map((r: { id: string }) => r.id)).toEqual([ids[0]]);
    expect(second.json.meta.has_more).toBe(false);
    const ready = await raw(
      emulator,
      'GET',
      '/v1/rl/model-resources?status=MODEL_RESOURCES_STATUS_READY%2CMODEL_RESOURCES_STATUS_PENDING',
      { apiKey: k },
    );
    expect(ready.json.data.map((r: { id: string }) => r.id).sort()).toEqual([ids[1], ids[2]].sort());
  });

  test('the emulator stays up after all of the above', async () => {
    expect((await raw(emulator, 'GET', '/_emulator/health')).json).toEqual({ ok: true });
  });
});

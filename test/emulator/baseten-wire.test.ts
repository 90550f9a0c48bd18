import { ledger, raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';
import { loopsClient, MODEL } from '../helpers/baseten-wire';

/**
 * The emulator's Baseten Loops dialect at the wire, as the official SDK and the docs describe it
 * (providers/baseten/WIRE.md): its control plane. A run's trainer and sampler are in baseten-wire-data.test.ts.
 */

let emulator: RunningEmulator;
let apiKey: string;

beforeAll(async () => {
  emulator = await startTestEmulator({ basetenPollHoldMs: 1_000 });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(() => {
  apiKey = testApiKey();
});

const { loops, newRun } = loopsClient(() => ({ emulator, apiKey }));

describe('control plane', () => {
  test('the API key is accepted as Api-Key (the SDK) or Bearer (the docs); without one the answer is 401', async () => {
    expect((await raw(emulator, 'GET', '/v1/loops/capabilities', { apiKey, scheme: 'Api-Key' })).status).toBe(200);
    expect((await raw(emulator, 'GET', '/v1/loops/capabilities', { apiKey, scheme: 'Bearer' })).status).toBe(200);
    const none = await raw(emulator, 'GET', '/v1/loops/capabilities', { apiKey: null });
    expect(none.status).toBe(401);
    expect(none.json.detail).toMatch(/Api-Key/);
  });

  test('capabilities list the models with their context lengths', async () => {
    const { json } = await loops('GET', '/v1/loops/capabilities');
    expect(json.supported_models).toEqual(
      expect.arrayContaining([expect.objectContaining({ model_name: MODEL, max_context_length: 2048, supports_vision_language: false })]),
    );
  });

  test('a run is created with the documented defaults, and bad fields are refused naming the field', async () => {
    const run = await newRun();
    expect(run).toMatchObject({
      name: MODEL, // defaults to the base model
      status: { name: 'ACTIVE' },
      scale_down_delay_seconds: 900,
      lora_rank: 64,
      replicas: 1,
      availability_model: 'dedicated',
      sampler: null,
      base_url: `${emulator.url}/baseten/trainers/${run.id}`,
    });
    const session = (await loops('POST', '/v1/loops/sessions')).json.session.id;
    for (const [field, value] of [
      ['scale_down_delay_seconds', 0],
      ['scale_down_delay_seconds', 3601],
      ['lora_rank', 0],
      ['availability_model', 'cheap'],
    ] as const) {
      const res = await loops('POST', '/v1/loops/trainers', { body: { session_id: session, base_model: MODEL, [field]: value } });
      expect(res.status).toBe(400);
      expect(res.json.detail).toContain(field);
    }
    expect((await loops('POST', '/v1/loops/trainers', { body: { session_id: 'nosuch', base_model: MODEL } })).status).toBe(404);
    expect((await loops('POST', '/v1/loops/trainers', { body: { session_id: session, base_model: 'nope/nope' } })).status).toBe(400);
    // /runs pairs a sampler with the trainer.
    expect((await newRun({}, '/v1/loops/runs')).sampler).toMatchObject({
      status: { name: 'ACTIVE' },
      base_url: expect.stringMatching(/\/baseten\/samplers\/\w+\/sync$/),
    });
  });

  test("a run is created with what it was asked for, read back by GET: seed, max_seq_len, lora_rank, replicas, spot, scale-down; over the model's limits is refused", async () => {
    const run = await newRun({
      seed: 11,
      max_seq_len: 1024,
      lora_rank: 16,
      replicas: 2,
      availability_model: 'spot',
      scale_down_delay_seconds: 3600,
    });
    expect((await loops('GET', `/v1/loops/runs/${run.id}`)).json.run).toMatchObject({
      seed: 11,
      max_seq_len: 1024,
      lora_rank: 16,
      replicas: 2,
      availability_model: 'spot',
      scale_down_delay_seconds: 3600,
      reused_from_run_id: null,
    });
    const session = (await loops('POST', '/v1/loops/sessions')).json.session.id;
    for (const [field, value] of [
      ['lora_rank', 65], // tiny-chat's maximum is 64
      ['max_seq_len', 4096], // and its longest sequence 2048
      ['replicas', 0],
      ['seed', 'x'],
    ] as const) {
      const res = await loops('POST', '/v1/loops/trainers', { body: { session_id: session, base_model: MODEL, [field]: value } });
      expect(res.status).toBe(400);
      expect(res.json.detail).toContain(field);
    }
  });

  test("reuse_from_run_id: a run of the same base model and team is reused; not with replicas > 1, nor a dedicated run by a spot one; another model's or team's is refused", async () => {
    const dedicated = await newRun();
    const spot = await newRun({ availability_model: 'spot' });
    const reused = async (body: Record<string, unknown>) => (await newRun(body)).reused_from_run_id;
    expect(await reused({ reuse_from_run_id: dedicated.id })).toBe(dedicated.id);
    expect(await reused({ reuse_from_run_id: spot.id, availability_model: 'spot' })).toBe(spot.id);
    expect(await reused({ reuse_from_run_id: dedicated.id, availability_model: 'spot' })).toBeNull();
    expect(await reused({ reuse_from_run_id: dedicated.id, replicas: 2 })).toBeNull();

    const session = (await loops('POST', '/v1/loops/sessions')).json.session.id;
    const create = (body: object) => loops('POST', '/v1/loops/trainers', { body: { session_id: session, base_model: MODEL, ...body } });
    const otherModel = await newRun({ base_model: 'Qwen/Qwen3-8B' });
    const refused = await create({ reuse_from_run_id: otherModel.id });
    expect(refused.status).toBe(400);
    expect(refused.json.detail).toMatch(/reuse_from_run_id .* is a run of Qwen\/Qwen3-8B/);
    const theirs = await raw(emulator, 'POST', '/v1/loops/sessions', { apiKey: 'another-team', scheme: 'Api-Key' });
    const theirRun = await raw(emulator, 'POST', '/v1/loops/trainers', {
      apiKey: 'another-team',
      scheme: 'Api-Key',
      body: { session_id: theirs.json.session.id, base_model: MODEL },
    });
    expect((await create({ reuse_from_run_id: theirRun.json.run.id })).json.detail).toMatch(/not a run of your team/);
  });

  test('runs are listed newest first, by run, base model or session; a newer run of the same session and model replaces the older', async () => {
    const a = await newRun();
    const b = await newRun({ base_model: 'Qwen/Qwen3-8B' });
    expect((await loops('GET', '/v1/loops/runs')).json.runs.map((r: any) => r.id)).toEqual([b.id, a.id]);
    expect((await loops('GET', `/v1/loops/runs?run_id=${a.id}`)).json.runs.map((r: any) => r.id)).toEqual([a.id]);
    expect((await loops('GET', '/v1/loops/runs?base_model=Qwen%2FQwen3-8B')).json.runs.map((r: any) => r.id)).toEqual([b.id]);
    expect((await loops('GET', `/v1/loops/runs?session_id=${a.session_id}`)).json.runs.map((r: any) => r.id)).toEqual([a.id]);

    const replacement = await loops('POST', '/v1/loops/trainers', { body: { session_id: a.session_id, base_model: MODEL } });
    expect((await loops('GET', `/v1/loops/runs/${a.id}`)).json.run).toMatchObject({
      status: { name: 'INACTIVE' },
      replaced_by: replacement.json.run.id,
    });
    expect((await ledger(emulator)).active).not.toContain(a.id);
    // Another account sees none of it.
    expect((await raw(emulator, 'GET', `/v1/loops/runs/${a.id}`, { apiKey: 'someone-else' })).status).toBe(404);
  });

  test('deactivating a run is idempotent, stops billing and its paired sampler; its trainer then answers 404 with the deactivated-model headers', async () => {
    const run = await newRun({}, '/v1/loops/runs');
    for (let i = 0; i < 2; i++) {
      const res = await loops('POST', `/v1/loops/runs/${run.id}/deactivate`);
      expect(res.json).toMatchObject({ id: run.id, base_model: MODEL, user: { email: expect.any(String) } });
    }
    const after = (await loops('GET', `/v1/loops/runs/${run.id}`)).json.run;
    expect(after).toMatchObject({ status: { name: 'INACTIVE' }, sampler: { status: { name: 'INACTIVE' } } });
    expect((await loops('GET', `/v1/loops/deployments/${run.deployment_id}`)).json.deployment.status.name).toBe('STOPPED');
    const health = await loops('GET', `${run.base_url}/health`);
    expect(health.status).toBe(404);
    expect(health.headers).toMatchObject({ 'x-baseten-error-source': '01', 'x-baseten-error-code': '631' });
    expect((await ledger(emulator)).active).not.toContain(run.id);
  });

  test('deployments are listed with their status and can be deactivated; a paired sampler cannot be deactivated alone (409)', async () => {
    const run = await newRun({}, '/v1/loops/runs');
    const listed = (await loops('GET', '/v1/loops/deployments')).json.deployments;
    expect(listed).toEqual([
      expect.objectContaining({ id: run.deployment_id, active_run_id: run.id, latest_run_id: run.id, status: { name: 'RUNNING' } }),
    ]);
    expect((await loops('POST', `/v1/loops/samplers/${run.sampler.id}/deactivate`)).status).toBe(409);
    expect((await loops('GET', `/v1/models/${run.sampler.model_id}/deployments/${run.sampler.deployment_id}`)).json.status).toBe('ACTIVE');
    await loops('POST', `/v1/loops/deployments/${run.deployment_id}/deactivate`);
    expect((await loops('GET', `/v1/loops/runs/${run.id}`)).json.run.status.name).toBe('INACTIVE');
    expect((await loops('GET', '/v1/loops/deployments')).json.deployments[0]).toMatchObject({
      active_run_id: null,
      status: { name: 'STOPPED' },
    });
  });

  test('a run idle for scale_down_delay_seconds scales to zero (INACTIVE, billing ends); health probes keep it warm', async () => {
    const createdBefore = Date.now();
    const run = await newRun({ scale_down_delay_seconds: 1 });
    const createdAfter = Date.now();
    // Heartbeats every 300 ms for 1.5 s: past the delay, still active.
    let lastSent = 0;
    let lastAnswered = 0;
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 300));
      lastSent = Date.now();
      expect((await loops('GET', `${run.base_url}/health?base_model=${encodeURIComponent(MODEL)}`)).status).toBe(200);
      lastAnswered = Date.now();
    }
    expect((await loops('GET', `/v1/loops/runs/${run.id}`)).json.run.status.name).toBe('ACTIVE');
    await new Promise((r) => setTimeout(r, 1_200));
    expect((await loops('GET', `/v1/loops/runs/${run.id}`)).json.run).toMatchObject({
      status: { name: 'INACTIVE' },
      deployment_status: 'SCALED_TO_ZERO',
    });
    // Billed from creation to one delay after the last heartbeat, and no longer.
    const billed = (await ledger(emulator)).resources.find((r) => r.id === run.id)!.gpuSeconds;
    expect(billed).toBeGreaterThanOrEqual((lastSent - createdAfter) / 1000 + 1 - 0.01);
    expect(billed).toBeLessThanOrEqual((lastAnswered - createdBefore) / 1000 + 1 + 0.01);
  });
});

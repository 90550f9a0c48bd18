import { ledger, raw, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';
import { ADAM, datum, loopsClient, MODEL } from '../helpers/baseten-wire';

/**
 * The emulator's Baseten Loops dialect at the wire (providers/baseten/WIRE.md): a run's trainer (202 + long poll,
 * Idempotency-Key) and its sampler, as the official SDK and the docs describe them.
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

const { loops, newRun, op } = loopsClient(() => ({ emulator, apiKey }));

describe('trainer data plane', () => {
  test('an operation is accepted with 202 and its Idempotency-Key as id; the same key again is the same operation, applied once', async () => {
    const run = await newRun();
    expect((await op(run, 'init_trainer_server', { lora_rank: 8, base_model: MODEL }, 'init-1')).result).toEqual({ step: 0, lora_rank: 8 });
    await op(run, 'forward_backward', { data: [datum([1, 5, 6, 7], 2)], loss_fn: 'cross_entropy' }, 'fb-1');
    const first = await loops('POST', `${run.base_url}/optim_step`, { body: { adam_params: ADAM }, key: 'opt-1' });
    const again = await loops('POST', `${run.base_url}/optim_step`, { body: { adam_params: ADAM }, key: 'opt-1' });
    expect(first.headers.location).toBe('/operations/opt-1');
    expect(again.json.operation_id).toBe('opt-1');
    expect((await loops('GET', `${run.base_url}/operations/opt-1`)).json).toMatchObject({
      status: 'done',
      result: { metrics: { step: 1, learning_rate: 0.02 } },
    });
    expect((await ledger(emulator)).sessions.find((s) => s.id === run.id)).toMatchObject({ optimizerSteps: 1, duplicatesAbsorbed: 1 });
    expect((await loops('GET', `${run.base_url}/policy_version`)).json).toEqual({ policy_version: 1 });
  });

  test('a refused submit is never a 400 (the SDK would resend it for an hour): bad bodies fail as operations, key misuse is 422', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    const bad = await op(run, 'forward_backward', { data: [datum([1, 5, 6], 1)], loss_fn: 'cispo' });
    expect(bad).toMatchObject({ status: 'error', error_class: 'ValueError', error: expect.stringMatching(/loss_fn 'cispo'/) });
    const noAdvantages = await op(run, 'forward_backward', { data: [datum([1, 5, 6], 1)], loss_fn: 'ppo' });
    expect(noAdvantages).toMatchObject({
      status: 'error',
      error_class: 'ValueError',
      error: expect.stringMatching(/(logprobs|advantages) is required for ppo/),
    });
    const shifted = await op(run, 'forward', {
      data: [{ ...datum([1, 5, 6], 1), loss_fn_inputs: { target_tokens: { data: [5, 6], dtype: 'int64' } } }],
    });
    expect(shifted).toMatchObject({ status: 'error', error_class: 'ValueError', error: expect.stringMatching(/same length/) });
    expect((await loops('POST', `${run.base_url}/optim_step`, { body: { adam_params: ADAM } })).status).toBe(422);
    await loops('POST', `${run.base_url}/optim_step`, { body: { adam_params: ADAM }, key: 'reused' });
    const reused = await loops('POST', `${run.base_url}/optim_step`, {
      body: { adam_params: { ...ADAM, learning_rate: 1 } },
      key: 'reused',
    });
    expect(reused).toMatchObject({ status: 422, json: { error: { code: 'IDEMPOTENCY_KEY_REUSED' } } });
    expect((await loops('GET', `${run.base_url}/operations/never-submitted`)).status).toBe(404);
  });

  test('cross-entropy the Baseten way: caller-shifted targets with -100 masks, null logprobs there, loss a per-token mean unless skip_token_normalization', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    const data = [datum([1, 5, 6, 7, 8], 3), datum([1, 9, 10], 1)];
    const mean = (await op(run, 'forward', { data, loss_fn: 'cross_entropy' })).result;
    const sum = (await op(run, 'forward', { data, loss_fn: 'cross_entropy', loss_fn_config: { skip_token_normalization: true } })).result;
    expect(mean.loss_fn_outputs.map((o: any) => o.logprobs.data.map((v: number | null) => v === null))).toEqual([
      [true, false, false, false, true],
      [true, false, true],
    ]);
    expect(mean.loss_fn_outputs[0].logprobs).toMatchObject({ dtype: 'float32', shape: [5] });
    const logprobs = sum.loss_fn_outputs.flatMap((o: any) => o.logprobs.data.filter((v: number | null) => v !== null));
    expect(sum.loss).toBeCloseTo(-logprobs.reduce((a: number, b: number) => a + b, 0), 4);
    expect(mean.loss).toBeCloseTo(sum.loss / 4, 4);
    expect(sum.metrics).toMatchObject({ skip_token_normalization: 1, num_tokens: 4 });
    expect(mean.metrics.skip_token_normalization).toBeUndefined();
    // A weights tensor scales each position's term.
    const weighted = (
      await op(run, 'forward', { data: [datum([1, 5, 6, 7, 8], 3, [0, 2, 2, 2, 0])], loss_fn_config: { skip_token_normalization: true } })
    ).result;
    const once = (await op(run, 'forward', { data: [data[0]], loss_fn_config: { skip_token_normalization: true } })).result;
    expect(weighted.loss).toBeCloseTo(2 * once.loss, 4);
  });

  test('importance_sampling and ppo: logprobs and advantages aligned with target_tokens (or a scalar [1]), clip thresholds from loss_fn_config', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    const base = datum([1, 5, 6, 7, 8], 3);
    const sum = { skip_token_normalization: true };
    const ce = (await op(run, 'forward', { data: [base], loss_fn_config: sum })).result;
    const sampled = ce.loss_fn_outputs[0].logprobs.data.map((v: number | null) => v ?? 0);
    const rl = (advantages: number[], logprobs = sampled) => ({
      ...base,
      loss_fn_inputs: {
        ...base.loss_fn_inputs,
        logprobs: { data: logprobs, dtype: 'float32' },
        advantages: { data: advantages, dtype: 'float32' },
      },
    });
    // Ratio 1 (the sampler's logprobs are the policy's): −Σ A over the 3 trained positions; a per-token mean by default.
    const is = (await op(run, 'forward', { data: [rl([0, 2, 2, 2, 0])], loss_fn: 'importance_sampling', loss_fn_config: sum })).result;
    expect(is.loss).toBeCloseTo(-6, 3);
    expect(is.loss_fn_outputs[0].logprobs.data.map((v: number | null) => v === null)).toEqual([true, false, false, false, true]);
    const mean = (await op(run, 'forward', { data: [rl([2])], loss_fn: 'importance_sampling' })).result;
    expect(mean.loss).toBeCloseTo(-2, 3);
    // PPO clips the ratio: sampled logprobs 1 nat lower make the ratio e, clipped to clip_high_threshold.
    const ppo = (
      await op(run, 'forward_backward', {
        data: [
          rl(
            [1],
            sampled.map((v: number) => v - 1),
          ),
        ],
        loss_fn: 'ppo',
        loss_fn_config: { ...sum, clip_high_threshold: 1.5 },
      })
    ).result;
    expect(ppo.loss).toBeCloseTo(-3 * 1.5, 3);
    const badClip = await op(run, 'forward', { data: [rl([1])], loss_fn: 'ppo', loss_fn_config: { clip_low_threshold: 1.5 } });
    expect(badClip).toMatchObject({ status: 'error', error_class: 'ValueError', error: expect.stringMatching(/clip_low_threshold/) });
    const short = await op(run, 'forward', { data: [rl([1, 1])], loss_fn: 'importance_sampling' });
    expect(short).toMatchObject({ status: 'error', error_class: 'ValueError', error: expect.stringMatching(/advantages has 2 values/) });
  });

  test('an unfinished operation is held, then answered 408 (poll again), then done', async () => {
    const slow = await startTestEmulator({ basetenPollHoldMs: 50, operationLatencyMs: 800 });
    try {
      const session = await raw(slow, 'POST', '/v1/loops/sessions', { apiKey });
      const run = (
        await raw(slow, 'POST', '/v1/loops/trainers', { apiKey, body: { session_id: session.json.session.id, base_model: MODEL } })
      ).json.run;
      await raw(slow, 'POST', `${run.base_url}/init_trainer_server`, { apiKey, idempotencyKey: 'init', body: { lora_rank: 4 } });
      const statuses: number[] = [];
      for (let i = 0; i < 40 && statuses[statuses.length - 1] !== 200; i++)
        statuses.push((await raw(slow, 'GET', `${run.base_url}/operations/init`, { apiKey })).status);
      expect(statuses[0]).toBe(408);
      expect(statuses[statuses.length - 1]).toBe(200);
    } finally {
      await slow.close();
    }
  });

  test('a held poll answers when its operation settles (completed or failed), not when its hold runs out', async () => {
    const held = await startTestEmulator({ basetenPollHoldMs: 20_000, operationLatencyMs: 300 });
    try {
      const session = await raw(held, 'POST', '/v1/loops/sessions', { apiKey });
      const run = (
        await raw(held, 'POST', '/v1/loops/trainers', { apiKey, body: { session_id: session.json.session.id, base_model: MODEL } })
      ).json.run;
      const settle = async (route: string, key: string, body: object) => {
        await raw(held, 'POST', `${run.base_url}/${route}`, { apiKey, idempotencyKey: key, body });
        const started = Date.now();
        const answer = await raw(held, 'GET', `${run.base_url}/operations/${key}`, { apiKey });
        return { answer, ms: Date.now() - started };
      };
      const init = await settle('init_trainer_server', 'init', { lora_rank: 4 });
      expect(init.answer.status).toBe(200);
      expect(init.answer.json.status).toBe('done');
      expect(init.ms).toBeLessThan(5_000); // the operation's 300 ms, far inside the 20 s hold
      const failed = await settle('forward_backward', 'bad', {
        data: [datum([1, 5], 1)],
        loss_fn: 'ppo',
        loss_fn_config: { clip_low_threshold: 1.5 },
      });
      expect(failed.answer.json.status).toBe('error');
      expect(failed.ms).toBeLessThan(5_000);
    } finally {
      await held.close();
    }
  });

  test('checkpoints: bt://loops URIs for trainer state and sampler weights, listed, validated, downloadable by page', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    await op(run, 'forward_backward', { data: [datum([1, 5, 6, 7], 2)] });
    await op(run, 'optim_step', { adam_params: ADAM });
    const state = (await op(run, 'save_state', { name: 'r1-state', ttl_seconds: null })).result;
    const sampler = (await op(run, 'save_weights_for_sampler', { name: 'r1-sampler', ttl_seconds: null, bump_version: false })).result;
    expect(state).toMatchObject({ path: `bt://loops:${run.id}/weights/r1-state`, step: 1 });
    expect(sampler).toEqual({ version: 1, path: `bt://loops:${run.id}/sampler_weights/r1-sampler` });

    const listed = (await loops('GET', `/v1/loops/checkpoints?run_id=${run.id}`)).json.checkpoints;
    expect(listed.map((c: any) => [c.checkpoint_id, c.target, c.lora_adapter_config.r])).toEqual([
      ['r1-state', 'trainer', 8],
      ['r1-sampler', 'sampler', 8],
    ]);
    expect((await loops('GET', `/v1/loops/checkpoints?checkpoint_path=${encodeURIComponent(sampler.path)}`)).json.checkpoints).toHaveLength(
      1,
    );
    expect((await loops('GET', `/v1/loops/checkpoints?base_model=${encodeURIComponent(MODEL)}`)).json.checkpoints).toHaveLength(2);
    expect((await loops('GET', '/v1/loops/checkpoints')).status).toBe(400); // exactly one filter
    expect(
      (await loops('POST', '/v1/loops/checkpoints/validate', { body: { checkpoint_path: sampler.path, run_id: run.id } })).status,
    ).toBe(200);
    expect((await loops('POST', '/v1/loops/checkpoints/validate', { body: { checkpoint_path: state.path } })).status).toBe(400); // not servable

    const trainerCkpt = listed[0];
    const pages: any[] = [];
    for (let token: number | null = 0; token !== null && pages.length < 10;) {
      const page: any = (await loops('GET', `/v1/loops/checkpoints/${trainerCkpt.id}/files?page_size=1&page_token=${token}`)).json;
      pages.push(page);
      token = page.next_page_token;
    }
    expect(pages.map((p) => p.presigned_urls[0].relative_file_name)).toEqual([
      'adapter_config.json',
      'adapter_state.json',
      'trainer_state.json',
    ]);
    expect(pages.map((p) => p.next_page_token)).toEqual([1, 2, null]);
    expect(pages[0].total_count).toBe(3);
    const url: string = pages[2].presigned_urls[0].url;
    const download = await raw(emulator, 'GET', url, { apiKey: null }); // presigned: no Authorization
    expect(download).toMatchObject({ status: 200, json: { step: 1 } });
    expect((await raw(emulator, 'GET', url.replace(/signature=\w+/, 'signature=forged'), { apiKey: null })).status).toBe(404);
  });

  test('load_state restores weights at step 0; load_state_with_optimizer restores the step too; sampler weights cannot be loaded', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    for (let i = 0; i < 2; i++) {
      await op(run, 'forward_backward', { data: [datum([1, 5, 6, 7], 2)] });
      await op(run, 'optim_step', { adam_params: ADAM });
    }
    const { path } = (await op(run, 'save_state', { name: 'two' })).result;
    const sampler = (await op(run, 'save_weights_for_sampler', { name: 'two-s' })).result;
    const probe = async () =>
      (await op(run, 'forward', { data: [datum([1, 5, 6, 7], 2)], loss_fn_config: { skip_token_normalization: true } })).result.loss;
    const trained = await probe();
    expect((await op(run, 'init_trainer_server', { lora_rank: 8 })).result).toEqual({ step: 0, lora_rank: 8 });
    expect(await probe()).not.toBeCloseTo(trained, 3); // a fresh adapter
    expect((await op(run, 'load_state', { path })).result).toEqual({ step: 0 });
    expect(await probe()).toBeCloseTo(trained, 4);
    expect((await op(run, 'load_state_with_optimizer', { path })).result).toEqual({ step: 2 });
    expect((await loops('GET', `${run.base_url}/policy_version`)).json.policy_version).toBe(2);
    expect(await op(run, 'load_state', { path: sampler.path })).toMatchObject({
      status: 'error',
      error: expect.stringMatching(/cannot be resumed/),
    });
  });
});

describe('sampler data plane', () => {
  test('a paired sampler serves completions with the policy version in a header; a pinned checkpoint until the live weights reach the floor', async () => {
    const run = await newRun();
    const created = await loops('POST', '/v1/loops/samplers', { body: { session_id: run.session_id, run_id: run.id } });
    const again = await loops('POST', '/v1/loops/samplers', { body: { session_id: run.session_id, run_id: run.id } });
    expect(again.json.sampler.id).toBe(created.json.sampler.id); // idempotent per run
    const sampleUrl = `${created.json.sampler.base_url}/sample`;
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    await op(run, 'forward_backward', { data: [datum([1, 5, 6, 7], 2)] });
    await op(run, 'optim_step', { adam_params: ADAM });
    const staged = (await op(run, 'save_weights_for_sampler', { name: 'staged', bump_version: false })).result;

    const body = {
      prompt: [1, 5],
      n: 2,
      temperature: 0,
      top_p: 1,
      logprobs: 0,
      return_tokens_as_token_ids: true,
      max_tokens: 3,
      seed: 0,
      stop_token_ids: [2],
      prompt_logprobs: 0,
    };
    const live = await loops('POST', sampleUrl, { body, headers: { 'x-run-id': run.id } });
    expect(live.status).toBe(200);
    expect(live.headers['x-trainers-policy-version']).toBe('0'); // nothing published yet: the base model
    expect(live.json.choices).toHaveLength(2);
    expect(live.json.choices[0]).toMatchObject({
      finish_reason: expect.stringMatching(/^(stop|length)$/),
      logprobs: { tokens: expect.any(Array), token_logprobs: expect.any(Array) },
    });
    expect(live.json.choices[0].prompt_logprobs).toEqual([null, { '5': expect.objectContaining({ logprob: expect.any(Number) }) }]);

    // Below the floor without a pin: 408 (the SDK retries). With a pin: the pinned checkpoint is served.
    expect((await loops('POST', sampleUrl, { body, headers: { 'x-min-policy-version': '1' } })).status).toBe(408);
    const pinned = await loops('POST', sampleUrl, { body, headers: { 'x-min-policy-version': '1', 'x-checkpoint-path': staged.path } });
    expect(pinned.headers['x-trainers-policy-version']).toBe('1');

    await op(run, 'save_weights_for_sampler', { name: 'published', bump_version: true });
    const published = await loops('POST', sampleUrl, { body, headers: { 'x-min-policy-version': '1' } });
    expect(published.headers['x-trainers-policy-version']).toBe('1');
    expect(published.json.choices[0].token_ids).toEqual(pinned.json.choices[0].token_ids); // the same weights, greedy

    const invalid = await loops('POST', sampleUrl, { body: { ...body, prompt: [] } });
    expect(invalid).toMatchObject({ status: 400, json: { error: { type: 'BadRequestError' } } }); // vLLM's permanent refusal
  });

  test('a standalone sampler serves a sampler checkpoint and is billed until deactivated', async () => {
    const run = await newRun();
    await op(run, 'init_trainer_server', { lora_rank: 8 });
    const saved = (await op(run, 'save_weights_for_sampler', { name: 'base' })).result;
    const created = (await loops('POST', '/v1/loops/samplers', { body: { session_id: run.session_id, model_path: saved.path } })).json
      .sampler;
    const res = await loops('POST', `${created.base_url}/sample`, {
      body: { prompt: [1, 5], max_tokens: 2, temperature: 0 },
      headers: { 'x-checkpoint-path': saved.path },
    });
    expect(res.status).toBe(200);
    expect((await loops('GET', '/v1/loops/samplers')).json.samplers.map((s: any) => s.id)).toContain(created.id);
    expect((await ledger(emulator)).active).toContain(created.id);
    expect((await loops('POST', `/v1/loops/samplers/${created.id}/deactivate`)).status).toBe(200);
    expect((await ledger(emulator)).active).not.toContain(created.id);
  });
});

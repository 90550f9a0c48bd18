import { ledger, raw, setFaults, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';
import { BT_FB, BT_OPT, FB, OPT, datum, recoveryWire, sample, sleep } from '../helpers/recovery-wire';

/**
 * Issue #15's faults at the wire, on each dialect they apply to (a dying trainer, a failed operation, a lost
 * session, a capacity shortage), the ledger's per-session lineage of empty optimizer steps, and sampled logprobs
 * agreeing with the trainer's forward pass.
 */

const CODES = ['INTERNAL_ERROR', 'TIMEOUT', 'RESOURCE_EXHAUSTED', 'INVALID_INPUT', 'NON_FINITE_LOSS', 'SESSION_NOT_ACTIVE'] as const;
let emulator: RunningEmulator;
let apiKey: string;

beforeAll(async () => {
  emulator = await startTestEmulator({ basetenPollHoldMs: 1_000 });
});

afterAll(async () => {
  await emulator.close();
});

beforeEach(async () => {
  apiKey = testApiKey();
  await setFaults(emulator, {});
});

const {
  ledgerResource,
  ledgerSession,
  rl,
  togetherResource,
  togetherSession,
  togetherOp,
  togetherStep,
  togetherResourceStatus,
  loops,
  basetenRun,
  trainerOp,
  deploymentStatus,
  runStatus,
  initTrainer,
  expectBillingStopped,
} = recoveryWire(() => ({ emulator, apiKey }));

describe('a failed operation', () => {
  test.each(CODES)('Together: fail-operation with %s fails the matching operation with that code, and applies nothing', async (code) => {
    const r = await togetherResource();
    const s = await togetherSession(r.id);
    await setFaults(emulator, { rules: [{ kind: 'fail-operation', operation: 'optim-step', errorCode: code }] });
    const op = await togetherOp(s, 'optim-step', OPT);
    expect(op).toMatchObject({
      status: 'TRAINING_OPERATION_STATUS_FAILED',
      error: { code: `TRAINING_OPERATION_ERROR_CODE_${code}`, message: expect.stringMatching(/injected fault/) },
    });
    expect(await ledgerSession(s)).toMatchObject({ status: 'RUNNING', optimizerSteps: 0, step: 0 });
  });

  test.each(CODES)('Baseten: fail-operation with %s answers status error with that code and its exception class', async (code) => {
    const run = await basetenRun();
    await initTrainer(run);
    await setFaults(emulator, { rules: [{ kind: 'fail-operation', operation: 'optim-step', errorCode: code, dialect: 'baseten' }] });
    const polled = await trainerOp(run, 'optim_step', BT_OPT);
    expect(polled.status).toBe(200);
    expect(polled.json).toMatchObject({ status: 'error', error_code: code, error_class: expect.stringMatching(/Error$/) });
    expect(await ledgerSession(run.id)).toMatchObject({ optimizerSteps: 0 });
  });

  test('an unknown error code is refused with a 400 naming the field; Together enum names are accepted', async () => {
    const bad = await raw(emulator, 'POST', '/_emulator/faults', { body: { rules: [{ kind: 'fail-operation', errorCode: 'OOPS' }] } });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toMatch(/rules\.0\.errorCode/);
    await setFaults(emulator, { rules: [{ kind: 'fail-operation', errorCode: 'TRAINING_OPERATION_ERROR_CODE_TIMEOUT' }] });
  });
});

describe('a dying trainer', () => {
  test('Together: resource-error fails the resource and its session, stops billing, leaves nothing active', async () => {
    const r = await togetherResource();
    const s = await togetherSession(r.id);
    await setFaults(emulator, { rules: [{ kind: 'resource-error', operation: 'optim-step' }] });
    const { fb, opt } = await togetherStep(s);
    expect(fb.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
    expect(opt.error.code).toBe('TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE');
    expect(await togetherResourceStatus(r.id)).toMatchObject({
      status: 'MODEL_RESOURCES_STATUS_ERROR',
      error: { code: expect.any(String) },
    });
    expect((await rl('GET', `/training-sessions/${s}`)).json).toMatchObject({
      status: 'TRAINING_SESSION_STATUS_ERROR',
      error: { code: 'TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE' },
    });
    const l = await ledger(emulator);
    expect(l.active).not.toContain(r.id);
    expect(l.resources.find((x) => x.id === r.id)).toMatchObject({ status: 'ERROR', error: 'RESOURCE_UNAVAILABLE' });
    await expectBillingStopped(r.id);
  });

  test('Baseten: resource-error makes the run INACTIVE, its deployment FAILED, and the trainer answers as a dead one', async () => {
    const run = await basetenRun();
    await initTrainer(run);
    await setFaults(emulator, { rules: [{ kind: 'resource-error', operation: 'optim-step' }] });
    const polled = await trainerOp(run, 'optim_step', BT_OPT);
    expect(polled.status).toBe(404); // the trainer is gone before the poll can read the failure
    expect(polled.headers['x-baseten-error-code']).toBe('631');
    expect((await runStatus(run)).status.name).toBe('INACTIVE');
    expect(await deploymentStatus(run)).toBe('FAILED');
    expect((await loops('GET', `${run.base_url}/health`)).status).toBe(404);
    expect(await ledgerSession(run.id)).toMatchObject({ status: 'ERROR' });
    expect((await ledger(emulator)).active).not.toContain(run.id);
    await expectBillingStopped(run.id);
  });

  test('Baseten: preempt reclaims a dedicated run: deployment PREEMPTED, run INACTIVE, trainer dead, billing stopped', async () => {
    const run = await basetenRun();
    await initTrainer(run);
    await setFaults(emulator, { rules: [{ kind: 'preempt', operation: 'forward-backward' }] });
    expect((await trainerOp(run, 'forward_backward', BT_FB)).status).toBe(404);
    expect(await deploymentStatus(run)).toBe('PREEMPTED');
    expect(await runStatus(run)).toMatchObject({
      status: { name: 'INACTIVE' },
      deployment_status: 'PREEMPTED',
      error: { code: 'PREEMPTED' },
    });
    expect((await loops('GET', `${run.base_url}/policy_version`)).status).toBe(404);
    expect(await ledgerResource(run.id)).toMatchObject({ status: 'ERROR', error: 'PREEMPTED' });
    await expectBillingStopped(run.id);
  });

  test('Together: preempt is a resource failure like resource-error (Together has no preempted state)', async () => {
    const r = await togetherResource();
    const s = await togetherSession(r.id);
    await setFaults(emulator, { rules: [{ kind: 'preempt', operation: 'forward-backward' }] });
    expect((await togetherOp(s, 'forward-backward', FB)).error.code).toBe('TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE');
    expect(await togetherResourceStatus(r.id)).toMatchObject({
      status: 'MODEL_RESOURCES_STATUS_ERROR',
      error: { code: 'MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE', message: expect.stringMatching(/preempted/) },
    });
    await expectBillingStopped(r.id);
  });
});

describe('a lost session', () => {
  test.each([
    ['session-expire', 'TRAINING_SESSION_STATUS_EXPIRED', undefined],
    ['session-error', 'TRAINING_SESSION_STATUS_ERROR', 'TRAINING_SESSION_ERROR_CODE_SESSION_FAILED'],
  ])(
    'Together: %s ends the session; later operations fail SESSION_NOT_ACTIVE; the resource stays READY and billing; a new session works',
    async (kind, status, errorCode) => {
      const r = await togetherResource();
      const s = await togetherSession(r.id);
      await setFaults(emulator, { rules: [{ kind, operation: 'optim-step' }] });
      const { opt } = await togetherStep(s);
      expect(opt.error.code).toBe('TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE');
      const session = (await rl('GET', `/training-sessions/${s}`)).json;
      expect(session.status).toBe(status);
      expect(session.error?.code).toBe(errorCode);
      expect((await togetherOp(s, 'optim-step', OPT)).error.code).toBe('TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE');

      expect((await togetherResourceStatus(r.id)).status).toBe('MODEL_RESOURCES_STATUS_READY');
      const billed = (await ledgerResource(r.id)).gpuSeconds;
      await sleep(40);
      expect((await ledgerResource(r.id)).gpuSeconds).toBeGreaterThan(billed);
      expect((await ledger(emulator)).active).toContain(r.id);

      const fresh = await togetherSession(r.id);
      expect((await togetherStep(fresh)).opt.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
      await rl('POST', `/model-resources/${r.id}/stop?force=true`);
    },
  );

  test('Baseten: session faults do not apply (a run is its own session): the operation runs and the rule sees nothing', async () => {
    const run = await basetenRun();
    await initTrainer(run);
    await setFaults(emulator, { rules: [{ kind: 'session-expire' }, { kind: 'session-error' }] });
    expect((await trainerOp(run, 'optim_step', BT_OPT)).json.status).toBe('done');
    const report = (await raw(emulator, 'GET', '/_emulator/faults')).json;
    expect(report.fired).toEqual([
      { kind: 'session-expire', fired: 0, seen: 0 },
      { kind: 'session-error', fired: 0, seen: 0 },
    ]);
  });
});

describe('a capacity shortage', () => {
  test('Together: capacity-queue keeps the create PENDING with a queue position counting down, then it provisions and bills from READY', async () => {
    await setFaults(emulator, { rules: [{ kind: 'capacity-queue', durationMs: 600, queuePosition: 4, dialect: 'together' }] });
    const r = await togetherResource();
    expect(r).toMatchObject({ status: 'MODEL_RESOURCES_STATUS_PENDING', status_details: { queue_position: 4 } });
    const positions: number[] = [];
    for (let i = 0; i < 200; i++) {
      // The ledger is read first: a status still PENDING after it proves the ledger was read while pending.
      const billed = (await ledgerResource(r.id)).gpuSeconds;
      const now = await togetherResourceStatus(r.id);
      if (now.status !== 'MODEL_RESOURCES_STATUS_PENDING') break;
      positions.push(now.status_details.queue_position as number);
      expect(billed).toBe(0);
      await sleep(20);
    }
    expect(positions.length).toBeGreaterThan(3);
    expect(positions).toEqual([...positions].sort((a, b) => b - a)); // never goes up
    expect(positions[positions.length - 1]).toBeLessThan(4);
    expect((await togetherResourceStatus(r.id)).status).toBe('MODEL_RESOURCES_STATUS_READY');
    expect(await togetherSession(r.id)).toEqual(expect.any(String));
    expect((await ledger(emulator)).active).toContain(r.id);
  });

  test('Together: capacity-timeout ends the create in ERROR with CAPACITY_WAIT_TIMEOUT, never billed', async () => {
    await setFaults(emulator, { rules: [{ kind: 'capacity-timeout', durationMs: 100, dialect: 'together' }] });
    const r = await togetherResource();
    expect(r.status_details.queue_position).toBeGreaterThan(0);
    await sleep(150);
    expect(await togetherResourceStatus(r.id)).toMatchObject({
      status: 'MODEL_RESOURCES_STATUS_ERROR',
      error: { code: 'MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT' },
    });
    expect(await ledgerResource(r.id)).toMatchObject({ status: 'ERROR', error: 'CAPACITY_WAIT_TIMEOUT', gpuSeconds: 0 });
    expect((await ledger(emulator)).active).not.toContain(r.id);
  });

  test('Baseten: capacity-queue holds the deployment CREATED (trainer 502, starting) for the wait, then it runs', async () => {
    await setFaults(emulator, { rules: [{ kind: 'capacity-queue', durationMs: 1000, dialect: 'baseten' }] });
    const run = await basetenRun();
    expect(await deploymentStatus(run)).toBe('CREATED');
    expect((await runStatus(run)).status.name).toBe('ACTIVE');
    expect((await loops('GET', `${run.base_url}/health`)).status).toBe(502);
    await sleep(1050);
    expect(await deploymentStatus(run)).toBe('RUNNING');
    expect((await loops('GET', `${run.base_url}/health`)).status).toBe(200);
    await initTrainer(run);
  });

  test('Baseten: capacity-timeout fails the deployment (FAILED, run INACTIVE, CAPACITY_WAIT_TIMEOUT), never billed', async () => {
    await setFaults(emulator, { rules: [{ kind: 'capacity-timeout', durationMs: 500, dialect: 'baseten' }] });
    const run = await basetenRun();
    expect(await deploymentStatus(run)).toBe('CREATED');
    await sleep(550);
    expect(await deploymentStatus(run)).toBe('FAILED');
    expect(await runStatus(run)).toMatchObject({ status: { name: 'INACTIVE' }, error: { code: 'CAPACITY_WAIT_TIMEOUT' } });
    expect((await loops('GET', `${run.base_url}/health`)).status).toBe(404);
    expect(await ledgerResource(run.id)).toMatchObject({ status: 'ERROR', error: 'CAPACITY_WAIT_TIMEOUT', gpuSeconds: 0 });
  });
});

describe('the ledger follows empty optimizer steps through checkpoints', () => {
  test('Together: a failed forward-backward leaves its optim-step empty; checkpoints carry the lineage count into resumed sessions', async () => {
    const r = await togetherResource();
    const s = await togetherSession(r.id);
    expect((await togetherStep(s)).opt.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
    const before = (await togetherOp(s, 'training-checkpoint')).output.checkpoint.id as string; // step 1, no empty step

    await setFaults(emulator, { rules: [{ kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INTERNAL_ERROR' }] });
    const { fb, opt } = await togetherStep(s);
    expect(fb.status).toBe('TRAINING_OPERATION_STATUS_FAILED');
    expect(opt).toMatchObject({ status: 'TRAINING_OPERATION_STATUS_COMPLETED', output: { step: '2' } }); // it still runs
    expect(await ledgerSession(s)).toMatchObject({
      step: 2,
      optimizerSteps: 2,
      emptyOptimizerSteps: 1,
      lineageEmptyOptimizerSteps: 1,
      resumedFromCheckpoint: null,
    });
    const after = (await togetherOp(s, 'training-checkpoint')).output.checkpoint.id as string; // step 2, one empty step
    await rl('POST', `/training-sessions/${s}/stop`);

    const l = await ledger(emulator);
    expect(l.checkpoints.find((c) => c.id === before)).toMatchObject({ step: 1, lineageEmptyOptimizerSteps: 0, sessionId: s });
    expect(l.checkpoints.find((c) => c.id === after)).toMatchObject({ step: 2, lineageEmptyOptimizerSteps: 1 });

    const resumed = await togetherSession(r.id, { resume_from_checkpoint_id: after });
    expect(await ledgerSession(resumed)).toMatchObject({
      resumedFromCheckpoint: after,
      step: 2,
      emptyOptimizerSteps: 0,
      lineageEmptyOptimizerSteps: 1,
    });
    expect((await togetherStep(resumed)).opt.output.step).toBe('3');
    expect(await ledgerSession(resumed)).toMatchObject({ step: 3, emptyOptimizerSteps: 0, lineageEmptyOptimizerSteps: 1 });
    await rl('POST', `/training-sessions/${resumed}/stop`);

    const rolledBack = await togetherSession(r.id, { resume_from_checkpoint_id: before });
    expect(await ledgerSession(rolledBack)).toMatchObject({ resumedFromCheckpoint: before, step: 1, lineageEmptyOptimizerSteps: 0 });
    await rl('POST', `/training-sessions/${rolledBack}/stop`);

    const weightsOnly = await togetherSession(r.id, { resume_from_checkpoint_id: after, load_optimizer: false });
    expect(await ledgerSession(weightsOnly)).toMatchObject({ resumedFromCheckpoint: after, step: 0, lineageEmptyOptimizerSteps: 1 });
    await rl('POST', `/model-resources/${r.id}/stop?force=true`);
    // The lineage count outlives the learners of the stopped sessions.
    expect(await ledgerSession(resumed)).toMatchObject({ status: 'STOPPED', step: 3, lineageEmptyOptimizerSteps: 1 });
  });

  test('Baseten: the same on a run, with load_state / load_state_with_optimizer in place on a new run', async () => {
    const run = await basetenRun();
    await initTrainer(run);
    await trainerOp(run, 'forward_backward', BT_FB);
    await trainerOp(run, 'optim_step', BT_OPT);
    const before = (await trainerOp(run, 'save_state', { name: 'before' })).json.result.path as string;
    await setFaults(emulator, {
      rules: [{ kind: 'fail-operation', operation: 'forward-backward', errorCode: 'TIMEOUT', dialect: 'baseten' }],
    });
    expect((await trainerOp(run, 'forward_backward', BT_FB)).json).toMatchObject({ status: 'error', error_code: 'TIMEOUT' });
    expect((await trainerOp(run, 'optim_step', BT_OPT)).json).toMatchObject({ status: 'done', result: { metrics: { step: 2 } } });
    const after = (await trainerOp(run, 'save_state', { name: 'after' })).json.result.path as string;
    expect(await ledgerSession(run.id)).toMatchObject({
      step: 2,
      emptyOptimizerSteps: 1,
      lineageEmptyOptimizerSteps: 1,
      resumedFromCheckpoint: null,
    });

    const next = await basetenRun();
    await initTrainer(next);
    await trainerOp(next, 'load_state_with_optimizer', { path: after });
    const l = await ledger(emulator);
    const afterId = l.checkpoints.find((c) => c.resourceId === run.id && c.name === 'after')!.id;
    expect(l.sessions.find((s) => s.id === next.id)).toMatchObject({
      resumedFromCheckpoint: afterId,
      step: 2,
      emptyOptimizerSteps: 0,
      lineageEmptyOptimizerSteps: 1,
    });
    await trainerOp(next, 'load_state', { path: before }); // weights only: step 0, the lineage of `before`
    expect(await ledgerSession(next.id)).toMatchObject({ step: 0, lineageEmptyOptimizerSteps: 0 });
    await initTrainer(next); // a fresh adapter: no checkpoint behind it
    expect(await ledgerSession(next.id)).toMatchObject({ resumedFromCheckpoint: null, lineageEmptyOptimizerSteps: 0 });
  });
});

describe('on-policy logprobs: what sample reports is what the trainer scores', () => {
  /** Max |sampled − forward| over the sampled tokens. */
  const maxDiff = (a: number[], b: number[]) => Math.max(...a.map((v, i) => Math.abs(v - b[i]!)));

  test.each(['Qwen/Qwen3-8B', 'Qwen/Qwen3.8-27B'])(
    'Together (%s): sample at temperature 1, then forward and compute_logprobs on prompt + sampled tokens agree within 1e-4',
    async (model) => {
      const r = await togetherResource(model);
      const s = await togetherSession(r.id);
      // Train a little (so seen tokens carry mass), publish to the generators, then sample mostly unseen ids.
      for (let i = 0; i < 3; i++) await togetherStep(s);
      await togetherOp(s, 'weights-sync', { weight_sync_type: 'WEIGHT_SYNC_TYPE_SYNCHRONOUS' });
      const prompt = [1, 5, 6, 7, 9_000, 120_000];
      const sampled = await togetherOp(s, 'sample', {
        model_inputs: [{ chunks: [{ encoded_text: { tokens: prompt } }] }],
        num_samples: 2,
        sampling_params: { max_tokens: 24, temperature: 1, seed: 11 },
      });
      let worst = 0;
      for (const seq of sampled.output.results[0].sequences) {
        const tokens = (seq.tokens as string[]).map(Number);
        const full = [...prompt, ...tokens];
        const forward = await togetherOp(s, 'forward-backward', {
          loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' },
          samples: [sample(full, tokens.length)],
          forward_only: true,
          return_loss_fn_outputs: true,
        });
        const scored = (forward.output.loss_fn_outputs[0].tensors.logprobs.data as number[]).slice(prompt.length - 1);
        const computed = await togetherOp(s, 'sample', {
          model_inputs: [{ chunks: [{ encoded_text: { tokens: full } }] }],
          num_samples: 1,
          prompt_logprobs: true,
          sampling_params: { max_tokens: 1 },
        });
        const promptLogprobs = (computed.output.results[0].prompt_logprobs as number[]).slice(prompt.length);
        worst = Math.max(worst, maxDiff(seq.logprobs as number[], scored), maxDiff(seq.logprobs as number[], promptLogprobs));
      }
      process.stderr.write(`[logprobs] ${model}: max |sample − forward| = ${worst.toExponential(2)}\n`);
      expect(worst).toBeLessThanOrEqual(1e-4);
      await rl('POST', `/model-resources/${r.id}/stop?force=true`);
    },
  );

  test('Baseten (Qwen/Qwen3.5-2B): the sampler at temperature 1 and the trainer forward agree within 1e-4', async () => {
    const run = await basetenRun('/v1/loops/runs', 'Qwen/Qwen3.5-2B');
    await initTrainer(run);
    const prompt = [1, 5, 6, 7, 9_000, 200_000];
    const sampled = await loops('POST', `${run.sampler.base_url}/sample`, {
      prompt,
      n: 1,
      temperature: 1,
      max_tokens: 24,
      seed: 5,
      logprobs: 0,
    });
    expect(sampled.status).toBe(200);
    const choice = sampled.json.choices[0];
    const tokens = choice.token_ids as number[];
    const forward = await trainerOp(run, 'forward', { data: [datum([...prompt, ...tokens], tokens.length)], loss_fn: 'cross_entropy' });
    const scored = (forward.json.result.loss_fn_outputs[0].logprobs.data as number[]).slice(
      prompt.length - 1,
      prompt.length - 1 + tokens.length,
    );
    const worst = maxDiff(choice.logprobs.token_logprobs as number[], scored);
    process.stderr.write(`[logprobs] Qwen/Qwen3.5-2B (Baseten): max |sample − forward| = ${worst.toExponential(2)}\n`);
    expect(worst).toBeLessThanOrEqual(1e-4);
  });
});

import { ledger, raw, type RunningEmulator } from './emulator';

/**
 * The recovery-fault wire tests' calls (test/emulator/recovery-faults.test.ts), Together's and Baseten's, raw: each
 * test reads the status and body it got. `context` is read at each call (the test's hooks set it).
 */

export const TINY = 'roundhouse/tiny-chat';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Together: tokens → a cross-entropy sample training the last `trained` positions' next tokens. */
export function sample(tokens: number[], trained: number): object {
  return {
    model_input: { chunks: [{ encoded_text: { tokens: tokens.slice(0, -1) } }] },
    loss_fn_inputs: {
      target_tokens: { data: tokens.slice(1), dtype: 'int64' },
      weights: { data: tokens.slice(1).map((_, i) => (i >= tokens.length - 1 - trained ? 1 : 0)), dtype: 'float32' },
    },
  };
}

export const FB = { loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' }, samples: [sample([1, 5, 6, 7, 8], 2)] };
export const OPT = { adam_params: { learning_rate: 0.02 } };

/** Baseten: tokens → a cross-entropy datum training the last `trained` positions' next tokens. */
export function datum(tokens: number[], trained: number): object {
  const targets = tokens.map((_t, i) => (i + 1 < tokens.length && i + 1 >= tokens.length - trained ? tokens[i + 1]! : -100));
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: { target_tokens: { data: targets, dtype: 'int64', shape: [targets.length] } },
  };
}

export const BT_FB = { data: [datum([1, 5, 6, 7, 8], 2)], loss_fn: 'cross_entropy' };
export const BT_OPT = { adam_params: { learning_rate: 0.02 } };

type Reply = Awaited<ReturnType<typeof raw>>;

export function recoveryWire(context: () => { emulator: RunningEmulator; apiKey: string }) {
  const ledgerResource = async (id: string) => (await ledger(context().emulator)).resources.find((r) => r.id === id)!;
  const ledgerSession = async (id: string) => (await ledger(context().emulator)).sessions.find((s) => s.id === id)!;

  // ── Together ───────────────────────────────────────────────────────────────────────────────────

  const rl = (method: 'GET' | 'POST', path: string, body?: object, key?: string) => {
    const { emulator, apiKey } = context();
    return raw(emulator, method, `/v1/rl${path}`, { apiKey, body, idempotencyKey: key });
  };

  async function togetherResource(model = TINY): Promise<{ id: string; status: string; [k: string]: any }> {
    const res = await rl('POST', '/model-resources', { base_model: model, compute_config: { num_generator_replicas: 1 } });
    expect(res.status).toBe(200);
    return res.json;
  }

  async function togetherSession(resourceId: string, extra: object = {}): Promise<string> {
    const res = await rl('POST', '/training-sessions', { model_resources_id: resourceId, lora_config: { rank: 8 }, ...extra });
    expect(res.status).toBe(200);
    return res.json.id as string;
  }

  /** Submits an operation, then polls it until it completed or failed. */
  async function togetherOp(sessionId: string, kind: string, body: object = {}): Promise<any> {
    const submitted = await rl('POST', `/training-sessions/${sessionId}/operations/${kind}`, body, `${kind}-${Math.random()}`);
    expect(submitted.status).toBe(200);
    return settleTogether(sessionId, kind, submitted.json.id as string);
  }

  async function settleTogether(sessionId: string, kind: string, id: string): Promise<any> {
    for (let i = 0; i < 500; i++) {
      const op = (await rl('GET', `/training-sessions/${sessionId}/operations/${kind}/${id}`)).json;
      if (op.status === 'TRAINING_OPERATION_STATUS_COMPLETED' || op.status === 'TRAINING_OPERATION_STATUS_FAILED') return op;
      await sleep(5);
    }
    throw new Error(`${kind} ${id} did not finish`);
  }

  /** Submits forward-backward and optim-step back to back (pipelined), then settles both. */
  async function togetherStep(sessionId: string): Promise<{ fb: any; opt: any }> {
    const fb = await rl('POST', `/training-sessions/${sessionId}/operations/forward-backward`, FB, `fb-${Math.random()}`);
    const opt = await rl('POST', `/training-sessions/${sessionId}/operations/optim-step`, OPT, `opt-${Math.random()}`);
    return {
      fb: await settleTogether(sessionId, 'forward-backward', fb.json.id as string),
      opt: await settleTogether(sessionId, 'optim-step', opt.json.id as string),
    };
  }

  async function togetherResourceStatus(id: string): Promise<any> {
    return (await rl('GET', `/model-resources/${id}`)).json;
  }

  // ── Baseten ────────────────────────────────────────────────────────────────────────────────────

  const loops = (method: 'GET' | 'POST', path: string, body?: object, key?: string) => {
    const { emulator, apiKey } = context();
    return raw(emulator, method, path, { apiKey, scheme: 'Api-Key', body, idempotencyKey: key });
  };

  async function basetenRun(
    route = '/v1/loops/trainers',
    model = TINY,
  ): Promise<{ id: string; base_url: string; deployment_id: string; [k: string]: any }> {
    const session = await loops('POST', '/v1/loops/sessions');
    const res = await loops('POST', route, { session_id: session.json.session.id, base_model: model, lora_rank: 8 });
    expect(res.status).toBe(200);
    return res.json.run;
  }

  /** Submits a trainer operation and long-polls it to its answer (the whole poll reply, status included). */
  async function trainerOp(run: { base_url: string }, route: string, body: object): Promise<Reply> {
    const key = `${route}-${Math.random()}`;
    const accepted = await loops('POST', `${run.base_url}/${route}`, body, key);
    expect(accepted.status).toBe(202);
    return pollTrainer(run, key);
  }

  async function pollTrainer(run: { base_url: string }, key: string): Promise<Reply> {
    for (let i = 0; i < 30; i++) {
      const polled = await loops('GET', `${run.base_url}/operations/${encodeURIComponent(key)}`);
      if (polled.status !== 408) return polled;
    }
    throw new Error(`operation ${key} did not finish`);
  }

  async function deploymentStatus(run: { deployment_id: string }): Promise<string> {
    return (await loops('GET', `/v1/loops/deployments/${run.deployment_id}`)).json.deployment.status.name;
  }

  async function runStatus(run: { id: string }): Promise<any> {
    return (await loops('GET', `/v1/loops/runs/${run.id}`)).json.run;
  }

  async function initTrainer(run: { base_url: string }): Promise<void> {
    expect((await trainerOp(run, 'init_trainer_server', { lora_rank: 8 })).json.status).toBe('done');
  }

  /** Billing has stopped: the resource's GPU-seconds do not grow. */
  async function expectBillingStopped(resourceId: string): Promise<void> {
    const billed = (await ledgerResource(resourceId)).gpuSeconds;
    await sleep(40);
    expect((await ledgerResource(resourceId)).gpuSeconds).toBe(billed);
  }

  return {
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
  };
}

import { raw, type RunningEmulator } from './emulator';

/** The Baseten Loops wire tests' calls (test/emulator/baseten-wire*.test.ts), as the official SDK makes them. */

export const MODEL = 'roundhouse/tiny-chat';

type Method = 'GET' | 'POST';

/** Calls to the emulator's Loops API with the test's key; `context` is read at each call (hooks set it). */
export function loopsClient(context: () => { emulator: RunningEmulator; apiKey: string }) {
  const loops = (method: Method, path: string, options: { body?: object; key?: string; headers?: Record<string, string> } = {}) => {
    const { emulator, apiKey } = context();
    return raw(emulator, method, path, {
      apiKey,
      scheme: 'Api-Key',
      body: options.body,
      idempotencyKey: options.key,
      headers: options.headers,
    });
  };

  async function newRun(body: Record<string, unknown> = {}, route = '/v1/loops/trainers') {
    const session = await loops('POST', '/v1/loops/sessions');
    const res = await loops('POST', route, { body: { session_id: session.json.session.id, base_model: MODEL, ...body } });
    expect(res.status).toBe(200);
    return res.json.run as { id: string; session_id: string; base_url: string; deployment_id: string; [k: string]: any };
  }

  /** Submit a trainer operation and long-poll it to its final answer. */
  async function op(run: { base_url: string }, route: string, body: object, key = `${route}-${Math.random()}`) {
    const accepted = await loops('POST', `${run.base_url}/${route}`, { body, key });
    expect(accepted.status).toBe(202);
    expect(accepted.json).toEqual({ operation_id: key, schema_version: 1 });
    for (let i = 0; i < 20; i++) {
      const polled = await loops('GET', `${run.base_url}/operations/${encodeURIComponent(key)}`);
      if (polled.status === 200) return polled.json as { status: 'done' | 'error'; result?: any; error?: string; error_class?: string };
      expect(polled.status).toBe(408);
    }
    throw new Error(`operation ${key} did not finish`);
  }

  return { loops, newRun, op };
}

/** tokens → Baseten cross-entropy datum training the last `trained` positions' next tokens. */
export function datum(tokens: number[], trained: number, weights?: number[]) {
  const targets = tokens.map((_t, i) => (i + 1 < tokens.length && i + 1 >= tokens.length - trained ? tokens[i + 1]! : -100));
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: targets, dtype: 'int64', shape: [targets.length] },
      ...(weights ? { weights: { data: weights, dtype: 'float32' } } : {}),
    },
    routed_experts_ref: null,
  };
}

export const ADAM = { learning_rate: 0.02, beta1: 0.9, beta2: 0.95, eps: 1e-12, weight_decay: 0, grad_clip_norm: 1 };

import { raw, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

/**
 * Together's policy-gradient losses (IMPORTANCE_SAMPLING, PPO, CISPO, GRPO) on forward-backward, computed by the
 * emulator's learner, checked over raw HTTP against hand computations from the learner's own forward logprobs.
 */

let emulator: RunningEmulator;
const key = 'policy-losses-key';
let counter = 0;

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  await emulator.close();
});

async function newSession(): Promise<string> {
  const resource = await raw(emulator, 'POST', '/v1/rl/model-resources', { apiKey: key, body: { base_model: 'roundhouse/tiny-chat' } });
  const session = await raw(emulator, 'POST', '/v1/rl/training-sessions', { apiKey: key, body: { model_resources_id: resource.json.id } });
  expect(session.status).toBe(200);
  return `/v1/rl/training-sessions/${session.json.id}`;
}

async function submit(session: string, kind: string, body: object): Promise<{ status: number; json: any }> {
  counter += 1;
  return raw(emulator, 'POST', `${session}/operations/${kind}`, { apiKey: key, idempotencyKey: `policy-${counter}`, body });
}

/** Submits an operation and waits for its COMPLETED output. */
async function run(session: string, kind: string, body: object): Promise<any> {
  const posted = await submit(session, kind, body);
  expect(posted.status).toBe(200);
  for (let i = 0; i < 2000; i++) {
    const res = await raw(emulator, 'GET', `${session}/operations/${kind}/${posted.json.id}`, { apiKey: key });
    const status: string = res.json.status;
    if (status.endsWith('COMPLETED')) return res.json.output;
    if (status.endsWith('FAILED')) throw new Error(`${kind} failed: ${JSON.stringify(res.json.error)}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`${kind} did not finish`);
}

interface Example {
  tokens: number[];
  targets: number[];
  weights: number[];
}

const f32 = (data: number[]) => ({ data, dtype: 'float32' });
const i64 = (data: number[]) => ({ data, dtype: 'int64' });

const EXAMPLES: Example[] = [
  { tokens: [5, 6, 7, 8, 9], targets: [6, 7, 8, 9, 10], weights: [0, 1, 1, 1, 1] },
  { tokens: [11, 12, 13], targets: [12, 13, 14], weights: [0, 1, 1] },
];

/** The learner's current logprobs of each example's targets (a forward-only cross-entropy call). */
async function currentLogprobs(session: string, examples: Example[]): Promise<number[][]> {
  const out = await run(session, 'forward-backward', {
    loss: { type: 'LOSS_TYPE_CROSS_ENTROPY' },
    samples: examples.map((e) => ({
      model_input: { chunks: [{ encoded_text: { tokens: e.tokens } }] },
      loss_fn_inputs: { target_tokens: i64(e.targets), weights: f32(e.tokens.map(() => 1)) },
    })),
    forward_only: true,
    return_loss_fn_outputs: true,
  });
  return out.loss_fn_outputs.map((o: any) => o.tensors.logprobs.data);
}

function policySamples(
  examples: Example[],
  sampling: number[][],
  advantages: number[][],
  extra: (i: number) => Record<string, unknown> = () => ({}),
) {
  return examples.map((e, i) => ({
    model_input: { chunks: [{ encoded_text: { tokens: e.tokens } }] },
    loss_fn_inputs: {
      target_tokens: i64(e.targets),
      logprobs: f32(sampling[i]!),
      advantages: f32(advantages[i]!),
      weights: f32(e.weights),
      ...extra(i),
    },
  }));
}

/** Per-token terms of the hand computation (before weighting and aggregation). */
function handTerms(
  kind: 'is' | 'ppo',
  logp: number[][],
  sampling: number[][],
  adv: number[][],
  weights: number[][],
  opts: { low?: number; high?: number; sequenceRatio?: boolean } = {},
): number[][] {
  const [low, high] = [opts.low ?? 0.8, opts.high ?? 1.2];
  return logp.map((row, s) => {
    let seqRatio = 0;
    if (opts.sequenceRatio) {
      const idx = row.map((_, i) => i).filter((i) => weights[s]![i] !== 0);
      seqRatio = Math.exp(idx.reduce((a, i) => a + row[i]! - sampling[s]![i]!, 0) / idx.length);
    }
    return row.map((lp, i) => {
      const r = opts.sequenceRatio ? seqRatio : Math.exp(lp - sampling[s]![i]!);
      const a = adv[s]![i]!;
      return kind === 'is' ? -r * a : -Math.min(r * a, Math.min(high, Math.max(low, r)) * a);
    });
  });
}

const weightedSum = (terms: number[][], weights: number[][]) =>
  terms.reduce((acc, row, s) => acc + row.reduce((a, t, i) => a + weights[s]![i]! * t, 0), 0);

describe('policy-gradient losses on forward-backward', () => {
  const weights = EXAMPLES.map((e) => e.weights);
  const advantages = [
    [0, 1.5, 1.5, 1.5, 1.5],
    [0, -0.7, -0.7],
  ];
  const offsets = [
    [0, 0.05, -0.1, 0.02, 0.3],
    [0, -0.05, 0.4],
  ];
  let session: string;
  let logp: number[][];
  let sampling: number[][];

  beforeAll(async () => {
    session = await newSession();
    logp = await currentLogprobs(session, EXAMPLES);
    sampling = logp.map((row, s) => row.map((v, i) => v - offsets[s]![i]!));
  });

  test('IMPORTANCE_SAMPLING is accepted and its loss is −Σ w·exp(logp − sampling_logp)·A', async () => {
    const body = {
      loss: { type: 'LOSS_TYPE_IMPORTANCE_SAMPLING' },
      samples: policySamples(EXAMPLES, sampling, advantages),
      forward_only: true,
      return_loss_fn_outputs: true,
    };
    const out = await run(session, 'forward-backward', body);
    expect(out.loss).toBeCloseTo(weightedSum(handTerms('is', logp, sampling, advantages, weights), weights), 4);
    // loss_fn_outputs are the logprobs as for cross-entropy, masked positions 0.
    const returned: number[][] = out.loss_fn_outputs.map((o: any) => o.tensors.logprobs.data);
    returned.forEach((row, s) => row.forEach((v, i) => expect(v).toBeCloseTo(weights[s]![i] ? logp[s]![i]! : 0, 5)));
  });

  test('PPO is accepted and its loss is the clipped-ratio sum; a (non forward-only) forward-backward reports it too', async () => {
    const body = {
      loss: { type: 'LOSS_TYPE_PPO', ppo_params: { clip_low_threshold: 0.9, clip_high_threshold: 1.1 } },
      samples: policySamples(EXAMPLES, sampling, advantages),
    };
    const expected = weightedSum(handTerms('ppo', logp, sampling, advantages, weights, { low: 0.9, high: 1.1 }), weights);
    expect((await run(session, 'forward-backward', { ...body, forward_only: true })).loss).toBeCloseTo(expected, 4);
    expect((await run(session, 'forward-backward', body)).loss).toBeCloseTo(expected, 4);
  });

  test('CISPO is accepted', async () => {
    const out = await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_CISPO', cispo_params: {} },
      samples: policySamples(EXAMPLES, sampling, advantages),
      forward_only: true,
    });
    const expected = logp.reduce(
      (acc, row, s) =>
        acc +
        row.reduce(
          (a, lp, i) => a - weights[s]![i]! * Math.min(1.2, Math.max(0.8, Math.exp(lp - sampling[s]![i]!))) * advantages[s]![i]! * lp,
          0,
        ),
      0,
    );
    expect(out.loss).toBeCloseTo(expected, 3);
  });

  test('GRPO defaults to a token mean of the clipped objective; SEQUENCE_MEAN and FIXED_HORIZON aggregate as documented', async () => {
    const terms = handTerms('ppo', logp, sampling, advantages, weights);
    const total = weightedSum(terms, weights);
    const tokens = weights.flat().filter((w) => w !== 0).length;
    const grpo = (params: object) =>
      run(session, 'forward-backward', {
        loss: { type: 'LOSS_TYPE_GRPO', grpo_params: params },
        samples: policySamples(EXAMPLES, sampling, advantages),
        forward_only: true,
      });
    expect((await grpo({})).loss).toBeCloseTo(total / tokens, 4);
    const sequenceMean =
      terms
        .map((row, s) => row.reduce((a, t, i) => a + weights[s]![i]! * t, 0) / weights[s]!.filter((w) => w !== 0).length)
        .reduce((a, b) => a + b, 0) / terms.length;
    expect((await grpo({ agg_type: 'GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN' })).loss).toBeCloseTo(sequenceMean, 4);
    expect((await grpo({ agg_type: 'GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON' })).loss).toBeCloseTo(total / (2 * 5), 4);
  });

  test('metrics name the reduction: the summed losses report loss:sum, GRPO under every agg_type loss:mean (UNSPECIFIED as TOKEN_MEAN)', async () => {
    const tokens = weights.flat().filter((w) => w !== 0).length;
    const metricsOf = async (loss: object) => {
      const out = await run(session, 'forward-backward', {
        loss,
        samples: policySamples(EXAMPLES, sampling, advantages),
        forward_only: true,
      });
      return { loss: out.loss as number, metrics: out.metrics as Record<string, number> };
    };
    for (const loss of [
      { type: 'LOSS_TYPE_IMPORTANCE_SAMPLING' },
      { type: 'LOSS_TYPE_PPO', ppo_params: {} },
      { type: 'LOSS_TYPE_CISPO', cispo_params: {} },
    ]) {
      const out = await metricsOf(loss);
      expect(out.metrics).toEqual({ 'loss:sum': out.loss, 'num_tokens:sum': tokens });
    }
    const unset = await metricsOf({ type: 'LOSS_TYPE_GRPO', grpo_params: {} });
    expect(unset.metrics).toEqual({ 'loss:mean': unset.loss, 'num_tokens:sum': tokens });
    for (const agg of ['UNSPECIFIED', 'TOKEN_MEAN', 'SEQUENCE_MEAN', 'FIXED_HORIZON']) {
      const out = await metricsOf({ type: 'LOSS_TYPE_GRPO', grpo_params: { agg_type: `GRPO_LOSS_AGGREGATION_TYPE_${agg}` } });
      expect(out.metrics).toEqual({ 'loss:mean': out.loss, 'num_tokens:sum': tokens });
      if (agg === 'UNSPECIFIED' || agg === 'TOKEN_MEAN') expect(out.loss).toBeCloseTo(unset.loss, 6);
    }
  });

  test('GRPO with the SEQUENCE ratio uses one ratio per sequence (the exp of its mean log-ratio)', async () => {
    const terms = handTerms('ppo', logp, sampling, advantages, weights, { sequenceRatio: true });
    const tokens = weights.flat().filter((w) => w !== 0).length;
    const out = await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_GRPO', grpo_params: { ratio_type: 'GRPO_LOSS_RATIO_TYPE_SEQUENCE' } },
      samples: policySamples(EXAMPLES, sampling, advantages),
      forward_only: true,
    });
    expect(out.loss).toBeCloseTo(weightedSum(terms, weights) / tokens, 4);
  });

  test('GRPO with beta > 0 adds the k3 KL penalty against reference_logprobs', async () => {
    const reference = logp.map((row) => row.map((v) => v - 0.25));
    const beta = 0.3;
    const terms = handTerms('ppo', logp, sampling, advantages, weights).map((row, s) =>
      row.map((t, i) => {
        const gap = reference[s]![i]! - logp[s]![i]!;
        return t + beta * (Math.exp(gap) - gap - 1);
      }),
    );
    const tokens = weights.flat().filter((w) => w !== 0).length;
    const out = await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_GRPO', grpo_params: { beta } },
      samples: policySamples(EXAMPLES, sampling, advantages, (i) => ({ reference_logprobs: f32(reference[i]!) })),
      forward_only: true,
    });
    expect(out.loss).toBeCloseTo(weightedSum(terms, weights) / tokens, 4);
  });
});

describe('PPO clipping', () => {
  const example: Example = { tokens: [30, 31, 32, 33], targets: [31, 32, 33, 34], weights: [1, 1, 1, 1] };

  test('a ratio outside the band contributes the clipped term, and then no gradient', async () => {
    const session = await newSession();
    const [logp] = await currentLogprobs(session, [example]);
    // ratios e, e, 1/e, 1/e with advantages +1, −1, +1, −1: clipped (1.2), unclipped (−e), unclipped (1/e), clipped (−0.8).
    const sampling = logp!.map((v, i) => (i < 2 ? v - 1 : v + 1));
    const adv = [1, -1, 1, -1];
    const out = await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_PPO' },
      samples: policySamples([example], [sampling], [adv]),
      forward_only: true,
    });
    expect(out.loss).toBeCloseTo(-(1.2 - Math.E + 1 / Math.E - 0.8), 4);

    // Only the clipped tokens: both sit outside the band on the clipped side, so the step changes nothing.
    const clippedOnly = { ...example, weights: [1, 0, 0, 1] };
    const clipped = await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_PPO' },
      samples: policySamples([clippedOnly], [sampling], [adv]),
    });
    expect(clipped.loss).toBeCloseTo(-(1.2 - 0.8), 4);
    await run(session, 'optim-step', { adam_params: { learning_rate: 0.05 } });
    const [after] = await currentLogprobs(session, [example]);
    after!.forEach((v, i) => expect(v).toBeCloseTo(logp![i]!, 5));
  });
});

describe('GRPO training', () => {
  const example: Example = { tokens: [40, 41, 42, 43, 44], targets: [41, 42, 43, 44, 45], weights: [0, 0, 1, 1, 1] };
  const completionLogprob = (row: number[]) => row.reduce((a, v, i) => a + example.weights[i]! * v, 0);

  async function stepWithAdvantage(advantage: number): Promise<{ before: number; after: number }> {
    const session = await newSession();
    const [logp] = await currentLogprobs(session, [example]);
    const adv = example.weights.map((w) => w * advantage);
    await run(session, 'forward-backward', {
      loss: { type: 'LOSS_TYPE_GRPO', grpo_params: {} },
      samples: policySamples([example], [logp!], [adv]),
    });
    await run(session, 'optim-step', { adam_params: { learning_rate: 0.01 } });
    const [after] = await currentLogprobs(session, [example]);
    return { before: completionLogprob(logp!), after: completionLogprob(after!) };
  }

  test('a positive advantage raises the completion’s logprob after optim-step', async () => {
    const { before, after } = await stepWithAdvantage(1);
    expect(after).toBeGreaterThan(before + 1e-3);
  });

  test('a negative advantage lowers the completion’s logprob after optim-step', async () => {
    const { before, after } = await stepWithAdvantage(-1);
    expect(after).toBeLessThan(before - 1e-3);
  });
});

describe('required inputs of the policy-gradient losses are checked with a 400 naming the field', () => {
  let session: string;
  const tokens = [1, 2, 3];
  const base = () => ({
    model_input: { chunks: [{ encoded_text: { tokens } }] },
    loss_fn_inputs: { target_tokens: i64([2, 3, 4]), logprobs: f32([-1, -1, -1]), advantages: f32([1, 1, 1]) } as Record<string, unknown>,
  });
  const without = (name: string) => {
    const s = base();
    delete s.loss_fn_inputs[name];
    return s;
  };
  const withInputs = (inputs: Record<string, unknown>) => {
    const s = base();
    Object.assign(s.loss_fn_inputs, inputs);
    return s;
  };

  beforeAll(async () => {
    session = await newSession();
  });

  async function expect400(loss: object, sample: object, message: RegExp): Promise<void> {
    const res = await submit(session, 'forward-backward', { loss, samples: [sample] });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ error: { message: expect.stringMatching(message), code: expect.any(String) } });
  }

  test('missing advantages', async () => {
    for (const type of ['LOSS_TYPE_IMPORTANCE_SAMPLING', 'LOSS_TYPE_PPO', 'LOSS_TYPE_GRPO']) {
      await expect400({ type }, without('advantages'), /samples\[0\]\.loss_fn_inputs\.advantages is required/);
    }
  });

  test('missing logprobs', async () => {
    await expect400({ type: 'LOSS_TYPE_PPO' }, without('logprobs'), /samples\[0\]\.loss_fn_inputs\.logprobs is required/);
  });

  test('missing target_tokens', async () => {
    await expect400({ type: 'LOSS_TYPE_GRPO' }, without('target_tokens'), /loss_fn_inputs\.target_tokens is required/);
  });

  test('logprobs, advantages and reference_logprobs must be float32', async () => {
    await expect400({ type: 'LOSS_TYPE_PPO' }, withInputs({ advantages: i64([1, 1, 1]) }), /advantages: dtype must be float32/);
    await expect400(
      { type: 'LOSS_TYPE_IMPORTANCE_SAMPLING' },
      withInputs({ logprobs: i64([-1, -1, -1]) }),
      /logprobs: dtype must be float32/,
    );
    await expect400(
      { type: 'LOSS_TYPE_GRPO', grpo_params: { beta: 0.1 } },
      withInputs({ reference_logprobs: i64([-1, -1, -1]) }),
      /reference_logprobs: dtype must be float32/,
    );
  });

  test('tensor lengths must match model_input', async () => {
    await expect400(
      { type: 'LOSS_TYPE_PPO' },
      withInputs({ advantages: f32([1, 1]) }),
      /advantages has 2 values but model_input has 3 tokens/,
    );
    await expect400(
      { type: 'LOSS_TYPE_GRPO' },
      withInputs({ logprobs: f32([-1, -1, -1, -1]) }),
      /logprobs has 4 values but model_input has 3 tokens/,
    );
  });

  test('weights and mask cannot both be present', async () => {
    await expect400(
      { type: 'LOSS_TYPE_GRPO' },
      withInputs({ weights: f32([1, 1, 1]), mask: i64([1, 1, 1]) }),
      /weights and mask cannot both be present/,
    );
  });

  test('a *_params key must belong to the loss type', async () => {
    await expect400({ type: 'LOSS_TYPE_GRPO', ppo_params: {} }, base(), /loss\.ppo_params does not belong to loss\.type LOSS_TYPE_GRPO/);
    await expect400({ type: 'LOSS_TYPE_IMPORTANCE_SAMPLING', ppo_params: {} }, base(), /loss\.ppo_params/);
    await expect400({ type: 'LOSS_TYPE_PPO', grpo_params: {} }, base(), /loss\.grpo_params/);
  });

  test('GRPO beta > 0 requires reference_logprobs', async () => {
    await expect400(
      { type: 'LOSS_TYPE_GRPO', grpo_params: { beta: 0.05 } },
      base(),
      /reference_logprobs is required when grpo_params\.beta > 0/,
    );
  });

  test('malformed params are refused with the field named', async () => {
    await expect400({ type: 'LOSS_TYPE_GRPO', grpo_params: { agg_type: 'MEAN' } }, base(), /agg_type/);
    await expect400({ type: 'LOSS_TYPE_PPO', ppo_params: { clip_low_threshold: 1.5 } }, base(), /clip_low_threshold/);
  });
});

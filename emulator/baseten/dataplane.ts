import { randomUUID } from 'node:crypto';
import type { CheckpointRef, Engine, OperationErrorCode, OperationInput, OperationRecord, ResourceRecord } from '../engine';
import { EmulatorHttpError } from '../errors';
import type { EmulatorRequest, Handler, JsonReply, Router } from '../http';
import { bundledTokenizer } from '../tokenizer';
import { loopsRoute } from './control';
import { deploymentStatus } from './views';
import {
  TRAINER_OPS,
  checkpointPath,
  checkpointRef,
  parseCheckpointPath,
  parseForward,
  parseInit,
  parseLoad,
  parseOptimStep,
  parseSample,
  parseSave,
  type TrainerOp,
} from './requests';
import { deactivatedModel, isActive, loopsOwner, runExtra, type LoopsState } from './state';

/**
 * Baseten Loops' data planes. The trainer at each run's `base_url` (`/baseten/trainers/<run>`): operations are
 * submitted with an `Idempotency-Key` that becomes the operation id (202), run in submission order on the run's
 * engine session, and are long-polled at `GET /operations/{id}` (held until done, 408 when the hold expires).
 * The sampler at each sampler's `base_url` (`/baseten/samplers/<id>/sync`): vLLM's completions body with token-id
 * prompts, answered synchronously (a dedicated sampler) with the served policy version in a header.
 */

export interface DataPlaneOptions {
  /** How long `GET /operations/{id}` holds an unfinished operation before answering 408 (the service: ~30 s). */
  pollHoldMs: number;
  /** Aborted once the emulator is closing: held polls answer at once. */
  closing: AbortSignal;
}

/** What the wire result needs beyond the engine's output: which route, and what the request asked for. */
interface OperationMeta {
  op: TrainerOp;
  skipTokenNormalization?: boolean;
  learningRate?: number;
}

const ERROR_CLASS: Record<OperationErrorCode, string> = {
  INVALID_INPUT: 'ValueError',
  NON_FINITE_LOSS: 'FloatingPointError',
  SESSION_NOT_ACTIVE: 'TrainerShutdownError',
  TIMEOUT: 'TimeoutError',
  RESOURCE_EXHAUSTED: 'MemoryError',
  INTERNAL_ERROR: 'RuntimeError',
};

const SAMPLE_TIMEOUT_MS = 120_000;

function header(req: EmulatorRequest, name: string): string | undefined {
  const h = req.headers[name];
  return Array.isArray(h) ? h[0] : h;
}

/** vLLM marks an invalid request with `type: BadRequestError`, which the SDK does not retry. */
function vllmRoute(handler: Handler): Handler {
  const wrapped = loopsRoute(handler);
  return async (req) => {
    const reply = await wrapped(req);
    if (reply.status !== 400) return reply;
    const body = reply.body as { error?: Record<string, unknown> };
    return { ...reply, body: { ...body, error: { ...body.error, type: 'BadRequestError' } } };
  };
}

export function addLoopsDataRoutes(router: Router, engine: Engine, state: LoopsState, options: DataPlaneOptions): void {
  /** The run behind a trainer URL: 404 + the deactivated-model headers once inactive, 502 while starting. */
  const trainer = (req: EmulatorRequest): { owner: string; run: ResourceRecord } => {
    const owner = loopsOwner(req);
    const run = state.run(req.params.run!, owner);
    if (!isActive(run)) throw deactivatedModel(`the trainer of run ${run.id}`);
    if (run.status !== 'READY')
      throw new EmulatorHttpError(502, 'NOT_READY', `the trainer of run ${run.id} is starting (${deploymentStatus(run)}); retry`);
    return { owner, run };
  };

  const T = '/baseten/trainers/:run';

  router.add(
    'GET',
    `${T}/health`,
    loopsRoute((req) => {
      const { run } = trainer(req);
      engine.noteActivity(run.id); // the SDK's 60 s heartbeat keeps a run from scaling down
      return { body: { status: 'ok', run_id: run.id } };
    }),
  );

  router.add(
    'GET',
    `${T}/policy_version`,
    loopsRoute((req) => {
      const { run } = trainer(req);
      const session = engine.findSession(run.id);
      return { body: { policy_version: session ? engine.sessionStep(session) : 0 } };
    }),
  );

  router.add(
    'GET',
    `${T}/status`,
    loopsRoute((req) => {
      const { run } = trainer(req);
      const session = engine.findSession(run.id);
      return {
        body: {
          step: session ? engine.sessionStep(session) : 0,
          lora_rank: session?.lora.rank ?? runExtra(run).loraRank,
          base_model: run.model.name,
          world_size: 1,
          data_parallel_size: runExtra(run).replicas,
        },
      };
    }),
  );

  for (const op of Object.keys(TRAINER_OPS) as TrainerOp[]) {
    router.add(
      'POST',
      `${T}/${op}`,
      loopsRoute(async (req) => {
        const { owner, run } = trainer(req);
        const key = header(req, 'idempotency-key');
        if (!key)
          throw new EmulatorHttpError(422, 'MISSING_IDEMPOTENCY_KEY', 'the Idempotency-Key header is required on trainer operations');
        const session = await state.ensureSession(run);
        let parsed: OperationMeta = { op };
        const parse = (): OperationInput => {
          switch (op) {
            case 'init_trainer_server':
              return parseInit(req.body, run.model.name, run.model.maxLoraRank, runExtra(run).seed);
            case 'forward':
            case 'forward_backward': {
              const f = parseForward(req.body, run.model.vocabSize, op === 'forward');
              parsed = { op, skipTokenNormalization: f.skipTokenNormalization };
              return f.input;
            }
            case 'optim_step': {
              const input = parseOptimStep(req.body);
              if (input.kind === 'optim-step') parsed = { op, learningRate: input.adam.learningRate };
              return input;
            }
            case 'save_state':
            case 'save_weights_for_sampler':
              return parseSave(req.body, op);
            case 'load_state':
            case 'load_state_with_optimizer':
              return parseLoad(req.body, op);
          }
        };
        let record: OperationRecord;
        try {
          // The route is part of what the key names: the same key on another route is a reuse, not a replay.
          record = engine.submitOperation(session.id, owner, key, `${op}\n${req.rawBody}`, parse, {
            invalidAs: 'failed-operation',
            kind: TRAINER_OPS[op],
          });
        } catch (err) {
          // A 400 would be resent by the SDK for up to an hour; a refused key is final.
          if (err instanceof EmulatorHttpError && err.status === 400) throw new EmulatorHttpError(422, err.code, err.message);
          throw err;
        }
        record.dialectNote ??= { ...parsed };
        return {
          status: 202,
          headers: { location: `/operations/${encodeURIComponent(key)}` },
          body: { operation_id: key, schema_version: 1 },
        };
      }),
    );
  }

  router.add(
    'GET',
    `${T}/operations/:id`,
    loopsRoute(async (req) => {
      const { owner, run } = trainer(req);
      const op = engine.operationByKey(run.id, owner, req.params.id!);
      if (!(await engine.whenSettled(op, options.pollHoldMs, options.closing))) {
        return { status: 408, body: { operation_id: req.params.id, status: 'pending' } };
      }
      if (op.status === 'FAILED') {
        const code = op.error?.code ?? 'INTERNAL_ERROR';
        return {
          body: {
            operation_id: req.params.id,
            status: 'error',
            error: op.error?.message ?? 'failed',
            error_class: ERROR_CLASS[code],
            error_code: code,
          },
        };
      }
      return {
        body: { operation_id: req.params.id, status: 'done', result: trainerResult(run, op, op.dialectNote as OperationMeta | undefined) },
      };
    }),
  );

  const trainerResult = (run: ResourceRecord, op: OperationRecord, m: OperationMeta | undefined): unknown => {
    const o = op.output!;
    switch (o.kind) {
      case 'trainer-reset':
        return { step: o.step, lora_rank: o.loraRank };
      case 'forward-backward':
        return {
          loss: o.loss,
          loss_fn_output_type: 'ArrayRecord',
          // Positions outside the loss are NaN on the service, so JSON null.
          loss_fn_outputs: o.logprobs.map((lp, i) => ({
            logprobs: { data: lp.map((v, j) => (o.counted[i]![j] ? v : null)), dtype: 'float32', shape: [lp.length] },
          })),
          metrics: { loss: o.loss, num_tokens: o.tokens, ...(m?.skipTokenNormalization ? { skip_token_normalization: 1 } : {}) },
        };
      case 'optim-step':
        return {
          metrics: {
            step: o.step,
            grad_norm: o.gradNorm,
            ...(m?.learningRate !== undefined ? { learning_rate: m.learningRate, lr: m.learningRate } : {}),
          },
        };
      case 'training-checkpoint': {
        const c = engine.getCheckpoint(o.checkpointId);
        return { mode: 'lora', path: checkpointPath(run.id, 'trainer', c.name ?? c.id), step: c.step };
      }
      case 'inference-checkpoint': {
        const c = engine.getCheckpoint(o.checkpointId);
        return { version: c.step, path: checkpointPath(run.id, 'sampler', c.name ?? c.id) };
      }
      case 'load-checkpoint':
        return { step: o.step };
      default:
        return {};
    }
  };

  // ── sampler ────────────────────────────────────────────────────────────────────────────────────────

  const S = '/baseten/samplers/:id';

  const samplerOf = (req: EmulatorRequest) => {
    const owner = loopsOwner(req);
    const found = state.sampler(req.params.id!, owner);
    if (!isActive(found.resource)) throw deactivatedModel(`sampler ${found.sampler.id}`);
    if (found.resource.status !== 'READY')
      throw new EmulatorHttpError(503, 'NOT_READY', `sampler ${found.sampler.id} is starting; retry`, { 'retry-after': '1' });
    return { owner, ...found };
  };

  router.add(
    'POST',
    `${S}/wake`,
    loopsRoute((req) => {
      samplerOf(req);
      return { status: 202, body: {} };
    }),
  );

  router.add(
    'GET',
    `${S}/sync/v1/models`,
    loopsRoute((req) => {
      const { resource, sampler } = samplerOf(req);
      const base = resource.model.name;
      const adapter = sampler.runId ? [{ id: `run-${sampler.runId}`, object: 'model', parent: base, root: base }] : [];
      return { body: { object: 'list', data: [{ id: base, object: 'model', parent: null, root: base }, ...adapter] } };
    }),
  );

  router.add(
    'GET',
    `${S}/sync/trainers_policy_version`,
    loopsRoute((req) => {
      const { resource } = samplerOf(req);
      return { body: { policy_version: engine.findSession(resource.id)?.weightsVersion ?? 0 } };
    }),
  );

  router.add(
    'POST',
    `${S}/sync/sample`,
    vllmRoute(async (req) => {
      const { owner, resource } = samplerOf(req);
      const session = await state.ensureSession(resource);
      const tokenizer = bundledTokenizer(resource.model.name);
      const request = parseSample(req.body, resource.model.vocabSize, tokenizer && ((text) => tokenizer.encode(text)));
      const pinned = header(req, 'x-checkpoint-path') ?? (req.body as { lora?: string } | undefined)?.lora;
      const floorText = header(req, 'x-min-policy-version');
      const floor = floorText === undefined ? undefined : Number(floorText);
      const live = session.weightsVersion;
      // A pinned checkpoint is served until the live adapter reaches the floor; without one, a replica behind the floor says 408.
      let fromCheckpoint: CheckpointRef | undefined;
      if (pinned && (floor === undefined || live < floor)) {
        const path = parseCheckpointPath(pinned);
        if (!path || !engine.findCheckpoint(checkpointRef(path), owner))
          throw new EmulatorHttpError(400, 'INVALID_ARGUMENT', `no checkpoint at ${pinned}`);
        fromCheckpoint = checkpointRef(path);
      } else if (floor !== undefined && live < floor) {
        return {
          status: 408,
          body: {
            error: { message: `the sampler serves policy version ${live}, below the requested ${floor}`, code: 'POLICY_VERSION_BEHIND' },
          },
        };
      }
      const key = header(req, 'idempotency-key') ?? randomUUID();
      const op = engine.submitOperation(session.id, owner, key, `sample\n${pinned ?? ''}\n${req.rawBody}`, () => ({
        kind: 'sample',
        prompts: [request.prompt],
        numSamples: request.numSamples,
        params: request.params,
        promptLogprobs: request.promptLogprobs,
        ...(fromCheckpoint ? { fromCheckpoint } : {}),
      }));
      await engine.whenSettled(op, SAMPLE_TIMEOUT_MS, options.closing);
      if (op.status === 'FAILED') {
        if (op.error?.code === 'INVALID_INPUT') throw new EmulatorHttpError(400, 'INVALID_ARGUMENT', op.error.message);
        if (op.error?.code === 'SESSION_NOT_ACTIVE') throw deactivatedModel(`sampler ${req.params.id}`);
        throw new EmulatorHttpError(500, op.error?.code ?? 'INTERNAL', op.error?.message ?? 'sampling failed');
      }
      if (op.status !== 'COMPLETED' || op.output?.kind !== 'sample')
        throw new EmulatorHttpError(504, 'TIMEOUT', 'sampling did not finish in time');
      return completion(resource, request.prompt, op.output.results[0]!, tokenizer);
    }),
  );
}

function completion(
  resource: ResourceRecord,
  prompt: number[],
  result: {
    sequences: { tokens: number[]; logprobs: number[]; stopReason: 'stop' | 'length' }[];
    promptLogprobs?: number[];
    policyVersion: number;
  },
  tokenizer: { decode(ids: readonly number[]): string } | undefined,
): JsonReply {
  // vLLM's prompt logprobs: one entry per prompt token, null first, each a map that holds the actual token.
  const promptLogprobs = result.promptLogprobs?.map((lp, k) =>
    k === 0 ? null : { [String(prompt[k])]: { logprob: lp, rank: 1, decoded_token: '' } },
  );
  const completionTokens = result.sequences.reduce((a, s) => a + s.tokens.length, 0);
  return {
    headers: { 'x-trainers-policy-version': String(result.policyVersion) },
    body: {
      id: `cmpl-${randomUUID().replace(/-/g, '')}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: resource.model.name,
      choices: result.sequences.map((s, index) => ({
        index,
        text: tokenizer ? tokenizer.decode(s.tokens) : '',
        token_ids: s.tokens,
        finish_reason: s.stopReason,
        logprobs: { tokens: s.tokens.map((t) => `token_id:${t}`), token_logprobs: s.logprobs },
        ...(promptLogprobs ? { prompt_logprobs: promptLogprobs, prompt_token_ids: prompt } : {}),
      })),
      usage: {
        prompt_tokens: prompt.length,
        completion_tokens: completionTokens,
        total_tokens: prompt.length * result.sequences.length + completionTokens,
      },
    },
  };
}

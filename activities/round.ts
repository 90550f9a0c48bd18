import fs from 'node:fs';
import path from 'node:path';
import { Context, ApplicationFailure } from '@temporalio/activity';
import type { ProviderSpec } from '../config/spec';
import { batchRows, learningRateAt, planSteps } from '../config/schedule';
import { tokenizerFor, type TextTokenizer } from '../config/tokenizer';
import { ProviderError } from '../providers/errors';
import type { AdamParams, Datum, ModelInfo, OperationHandle, OptimStepResult, ForwardResult, TrainingProvider } from '../providers/types';
import type { RoundInput, RoundSpec } from '../workflows/round-contract';
import { DataValidationError, loadPreferenceData, loadRoundData, readDataset, sha256File, toDatum, tokenizeRow, type TokenizedPair, type TokenizedRow } from './data';
import { rewardFunction } from './rewards';
import { atBoundary } from './failures';
import { scoreCompletion } from './scoring';
import { writeJsonAtomic } from './files';
import { recordLatestLoss, recordOptimizerSteps, recordResource, recordRoundGpuMinutes } from './metrics';

/** What the activities need from the worker: providers (holding API keys) and where the local emulator is. */
export interface ActivityDeps {
  providerFor(spec: ProviderSpec): Promise<TrainingProvider>;
  /** True once the worker is shutting down: training segments stop submitting steps and return their cursor. */
  draining?(): boolean;
}

export interface RoundPlan {
  trainSha256: string;
  evalSha256: string;
  trainRows: number;
  evalRows: number;
  stepsPerEpoch: number;
  totalSteps: number;
  gpuCount: number;
  /** The provider's quoted price of the trainer resource per hour (USD), when it quotes one. */
  pricePerHour?: number;
}

export interface ProvisionedTrainer {
  resourceId: string;
  /** When it was seen ready (ms since epoch). */
  readyAtMs: number;
}

export interface TrainingCursor {
  /** Round-local optimizer steps confirmed applied. */
  step: number;
}

export interface SegmentInput {
  campaignId: string;
  round: number;
  spec: RoundSpec;
  data: { train: string; eval: string; trainSha256: string; evalSha256: string };
  sessionId: string;
  /** The provider's step counter when the session opened (non-zero when resumed from a checkpoint). */
  stepOffset: number;
  cursor: TrainingCursor;
  totalSteps: number;
  /** Where per-step losses of this segment are written (atomically). */
  stepsDir: string;
}

export interface SegmentResult {
  cursor: TrainingCursor;
  stepsApplied: number;
  latestLoss?: number;
  meanLoss?: number;
}

/** Heartbeat details of a training segment: the resume cursor and the operations in flight. */
interface SegmentHeartbeat {
  step: number;
  inFlight: { step: number; fb: OperationHandle<ForwardResult>; opt: OperationHandle<OptimStepResult> }[];
}

interface PreparedData {
  tokenizer: TextTokenizer;
  model: ModelInfo;
  train: TokenizedRow[];
  eval: TokenizedRow[];
  trainSha256: string;
  evalSha256: string;
}

const preparedCache = new Map<string, PreparedData>();

/**
 * Where a training segment starts, checked against the trainer: the session must be running, and its step counter
 * must sit inside what this segment may have applied: never behind the cursor (progress lost) and never past the
 * segment's end (someone else trained this session). `applied` is that counter in round steps.
 */
export async function segmentStart(provider: TrainingProvider, input: SegmentInput): Promise<{ applied: number; maxStep: number }> {
  const maxStep = Math.min(input.totalSteps, input.cursor.step + input.spec.training.segmentSteps);
  const session = await provider.getSession(input.sessionId);
  if (session.state !== 'running') {
    throw new ProviderError('SESSION_NOT_ACTIVE', 'needs-reconcile', `training session ${input.sessionId} is ${session.state}`, { providerCode: 'SESSION_NOT_ACTIVE' });
  }
  const applied = session.step - input.stepOffset;
  if (applied < input.cursor.step || applied > maxStep) {
    throw ApplicationFailure.create({
      type: 'StepCounterMismatch',
      nonRetryable: true,
      message: `session ${input.sessionId} is at round step ${applied} but the segment starts at ${input.cursor.step} and ends by ${maxStep}; refusing to train over it`,
    });
  }
  return { applied, maxStep };
}

/**
 * How a training segment stops early and cleanly: it submits no new step once the worker drains (SIGTERM) or the
 * workflow interrupts the segment (a cancellation: pause, budget, stop), and it gives the steps already in flight
 * `drainMs` to land before their waits are aborted. It then returns its cursor like any segment end.
 */
export function segmentStopper(deps: ActivityDeps, drainMs = 30_000): { stopping(): boolean; signal: AbortSignal } {
  const cancelled = Context.current().cancellationSignal;
  const window = new AbortController();
  const startWindow = () => setTimeout(() => window.abort(cancelled.reason), drainMs).unref();
  if (cancelled.aborted) startWindow();
  else cancelled.addEventListener('abort', startWindow, { once: true });
  return { stopping: () => cancelled.aborted || (deps.draining?.() ?? false), signal: window.signal };
}

/** What a segment says of the steps it confirmed: how many, and the loss per trained token (latest and mean). */
export function lossSummary(steps: { loss: number; tokens: number }[]): Omit<SegmentResult, 'cursor'> {
  const perToken = (s: { loss: number; tokens: number }) => s.loss / Math.max(1, s.tokens);
  const last = steps[steps.length - 1];
  return {
    stepsApplied: steps.length,
    latestLoss: last ? perToken(last) : undefined,
    meanLoss: steps.length ? steps.reduce((a, s) => a + perToken(s), 0) / steps.length : undefined,
  };
}

/** The optimizer step's AdamW parameters at a learning rate. */
export function adamAt(t: RoundSpec['training'], learningRate: number): AdamParams {
  return { learningRate, beta1: t.adam.beta1, beta2: t.adam.beta2, eps: t.adam.eps, weightDecay: t.adam.weightDecay, gradClipNorm: t.adam.gradClipNorm };
}

/** Fails the segment if an optimizer step did not land where the round expects (someone else stepped the session). */
export function checkOptimStep(result: OptimStepResult, step: number, stepOffset: number): void {
  if (result.step - stepOffset !== step + 1) {
    throw ApplicationFailure.create({ type: 'StepCounterMismatch', nonRetryable: true, message: `optim_step for round step ${step + 1} reported provider step ${result.step} (offset ${stepOffset})` });
  }
}

export function roundKey(campaignId: string, round: number, ...parts: (string | number)[]): string {
  return [campaignId, `r${round}`, ...parts].join('/');
}

function heartbeat(details?: unknown): void {
  Context.current().heartbeat(details);
}

export interface PreparedPairs {
  tokenizer: TextTokenizer;
  model: ModelInfo;
  train: TokenizedPair[];
  eval: TokenizedPair[];
  trainSha256: string;
  evalSha256: string;
}

const preparedPairsCache = new Map<string, PreparedPairs>();

/**
 * Data preparation shared by every round kind: the model's limits from the provider, the data loaded, checked
 * and tokenised (cached per file hash), and the hashes the workflow recorded checked again.
 */
export function createPreparer(deps: ActivityDeps) {
  const modelInfo = async (provider: TrainingProvider, spec: ProviderSpec): Promise<ModelInfo> => {
    const models = await provider.supportedModels();
    const model = models.find((m) => m.name === spec.model);
    if (!model) {
      throw ApplicationFailure.create({
        type: 'InvalidInput',
        nonRetryable: true,
        message: `provider.model: '${spec.model}' is not supported by ${provider.kind}; supported: ${models.map((m) => m.name).join(', ')}`,
      });
    }
    return model;
  };

  /** Loads, validates and tokenises the data (cached per file hash); checks the hashes the workflow recorded. */
  const prepared = async (spec: RoundSpec, data: RoundInput['data']): Promise<PreparedData> => {
    const provider = await deps.providerFor(spec.provider);
    const model = await modelInfo(provider, spec.provider);
    const { trainSha256, evalSha256 } = checkHashes(data);
    const key = [data.train, trainSha256, data.eval, evalSha256, spec.provider.model, spec.provider.tokenizer ?? '', spec.training.maxSeqLen].join('|');
    const cached = preparedCache.get(key);
    if (cached) return cached;
    const tokenizer = tokenizerFor(spec.provider.model, model.tokenizer, spec.provider.tokenizer);
    const loaded = loadRoundData(data.train, data.eval, tokenizer, { maxSeqLen: spec.training.maxSeqLen, modelMaxSeqLen: model.maxSeqLen });
    checkLoraRank(spec, model);
    const result = { tokenizer, model, train: loaded.train.rows, eval: loaded.eval.rows, trainSha256, evalSha256 };
    preparedCache.set(key, result);
    return result;
  };


  /** DPO's preference pairs, checked and cached the same way. */
  const preparedPairs = async (spec: RoundSpec, data: RoundInput['data']): Promise<PreparedPairs> => {
    const provider = await deps.providerFor(spec.provider);
    const model = await modelInfo(provider, spec.provider);
    checkHashes(data);
    const key = [data.train, sha256File(data.train), data.eval, sha256File(data.eval), spec.provider.model, spec.provider.tokenizer ?? '', spec.training.maxSeqLen].join('|');
    const cached = preparedPairsCache.get(key);
    if (cached) return cached;
    const tokenizer = tokenizerFor(spec.provider.model, model.tokenizer, spec.provider.tokenizer);
    const loaded = loadPreferenceData(data.train, data.eval, tokenizer, { maxSeqLen: spec.training.maxSeqLen, modelMaxSeqLen: model.maxSeqLen });
    checkLoraRank(spec, model);
    const result = { tokenizer, model, ...loaded };
    preparedPairsCache.set(key, result);
    return result;
  };

  return { modelInfo, prepared, preparedPairs };
}

function checkHashes(data: RoundInput['data']): { trainSha256: string; evalSha256: string } {
  const trainSha256 = sha256File(data.train);
  const evalSha256 = sha256File(data.eval);
  for (const [which, expected, actual] of [['train', data.trainSha256, trainSha256], ['eval', data.evalSha256, evalSha256]] as const) {
    if (expected && expected !== actual) {
      throw ApplicationFailure.create({
        type: 'InvalidInput',
        nonRetryable: true,
        message: `data.${which}: ${data[which]} changed since the round started (sha256 ${actual.slice(0, 12)}…, expected ${expected.slice(0, 12)}…)`,
      });
    }
  }
  return { trainSha256, evalSha256 };
}

function checkLoraRank(spec: RoundSpec, model: ModelInfo): void {
  if (spec.training.loraRank > model.maxLoraRank) {
    throw ApplicationFailure.create({ type: 'InvalidInput', nonRetryable: true, message: `training.loraRank: ${spec.training.loraRank} is over ${model.name}'s maximum of ${model.maxLoraRank}` });
  }
}

export function createRoundActivities(deps: ActivityDeps) {
  const { prepared, preparedPairs } = createPreparer(deps);

  return {
    /** Every check that can be made before provisioning: schema was checked by the caller; data, tokens, model here. */
    async prepareRound(input: Pick<RoundInput, 'spec' | 'data'>): Promise<RoundPlan> {
      return atBoundary(async () => {
        const p = input.spec.round?.kind === 'dpo' ? await preparedPairs(input.spec, input.data) : await prepared(input.spec, input.data);
        const reward = input.spec.round?.grpo?.reward;
        if (reward?.kind === 'module') {
          try {
            rewardFunction(reward); // loads it now: a bad module fails the round before anything is provisioned
          } catch (err) {
            throw ApplicationFailure.create({ type: 'InvalidInput', nonRetryable: true, message: `round.grpo.reward.path: ${reward.path} does not load: ${(err as Error).message.split('\n')[0]}` });
          }
        }
        const plan = planSteps(p.train.length, input.spec.training.batchSize, input.spec.training.epochs);
        const provider = await deps.providerFor(input.spec.provider);
        const quote = await provider.estimateCost?.(input.spec.provider.model, input.spec.provider.generatorReplicas).catch(() => undefined);
        return {
          pricePerHour: quote?.currency === 'USD' ? quote.pricePerHour : undefined,
          trainSha256: p.trainSha256,
          evalSha256: p.evalSha256,
          trainRows: p.train.length,
          evalRows: p.eval.length,
          ...plan,
          gpuCount: p.model.gpuCount ?? 1,
        };
      });
    },

    /**
     * Creates the trainer and waits until it is ready. The resources this account already had are recorded in
     * the first heartbeat, so an attempt that died after the create (its response unseen) finds and adopts the
     * new resource by listing instead of creating a second one.
     */
    async provisionTrainer(input: { spec: RoundSpec; ownerTag: string }): Promise<ProvisionedTrainer> {
      const provider = await deps.providerFor(input.spec.provider);
      const previous = Context.current().info.heartbeatDetails as { before?: string[]; resourceId?: string } | undefined;
      let resourceId = previous?.resourceId;
      return atBoundary(
        async () => {
          const before = previous?.before ?? (await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id);
          heartbeat({ before, resourceId });
          if (!resourceId) {
            const adopted = previous?.before ? await adoptNewResource(provider, before, input.spec.provider.model) : undefined;
            if (adopted) {
              resourceId = adopted;
            } else {
              try {
                resourceId = (
                  await provider.provision({
                    model: input.spec.provider.model,
                    ownerTag: input.ownerTag,
                    generatorReplicas: input.spec.provider.generatorReplicas,
                    inactiveTimeoutSeconds: input.spec.provider.inactiveTimeoutSeconds,
                  })
                ).id;
              } catch (err) {
                if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
                resourceId = await adoptNewResource(provider, before, input.spec.provider.model);
                if (!resourceId) {
                  // The create did not happen after all: let Temporal retry it (the next attempt looks again first).
                  throw ApplicationFailure.retryable(`resource create outcome unknown and no new resource found; retrying`, 'ProvisionUnconfirmed');
                }
              }
            }
            heartbeat({ before, resourceId });
          }
          const timer = setInterval(() => heartbeat({ before, resourceId }), 1000);
          try {
            await provider.waitReady(resourceId, {
              timeoutMs: input.spec.advanced.provisionTimeoutMinutes * 60_000,
              signal: Context.current().cancellationSignal,
            });
          } catch (err) {
            // Cancelled or failed after the create: the workflow may never hear the id, so release it here.
            await provider.deactivate(resourceId).catch(() => undefined);
            throw err;
          } finally {
            clearInterval(timer);
          }
          recordResource('provisioned', { provider: input.spec.provider.kind });
          return { resourceId, readyAtMs: Date.now() };
        },
        () => ({ resourceId }),
      );
    },

    /** Opens the training session: fresh, or from a training checkpoint (with or without optimizer state). */
    async openTrainingSession(input: {
      spec: RoundSpec;
      resourceId: string;
      ownerTag: string;
      startFrom?: RoundInput['startFrom'];
    }): Promise<{ sessionId: string; stepOffset: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      const previous = Context.current().info.heartbeatDetails as { sessionId?: string } | undefined;
      return atBoundary(async () => {
        heartbeat({ sessionId: previous?.sessionId, attempt: true });
        if (previous?.sessionId) {
          const existing = await provider.getSession(previous.sessionId).catch(() => undefined);
          if (existing?.state === 'running') return { sessionId: existing.id, stepOffset: existing.step };
        }
        const displayName = input.ownerTag.slice(0, 200);
        // An unanswered create may have opened a session: adopt it rather than opening a second.
        const adopt = async () => (await provider.listSessions(input.resourceId)).find((s) => s.displayName === displayName && s.state === 'running');
        let session = previous ? await adopt() : undefined;
        if (!session) {
          try {
            session = await provider.openSession({
              resourceId: input.resourceId,
              loraRank: input.spec.training.loraRank,
              loraAlpha: input.spec.training.loraAlpha,
              seed: input.spec.training.seed,
              fromCheckpoint: input.startFrom && { id: input.startFrom.checkpointId, loadOptimizer: input.startFrom.loadOptimizer },
              displayName,
            });
          } catch (err) {
            if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
            session = await adopt();
            if (!session) throw ApplicationFailure.retryable(`session create outcome unknown and none found on ${input.resourceId}; retrying`, 'SessionUnconfirmed');
          }
        }
        heartbeat({ sessionId: session.id });
        return { sessionId: session.id, stepOffset: session.step };
      });
    },

    /** Cross-entropy of the answers of a dataset, forward only (no gradient): the baseline and trained loss. */
    async measureLoss(input: {
      campaignId: string;
      round: number;
      label: string;
      spec: RoundSpec;
      data: SegmentInput['data'];
      sessionId: string;
      which: 'train' | 'eval';
    }): Promise<{ lossSum: number; tokens: number; perToken: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        const p = await prepared(input.spec, input.data);
        const rows = input.which === 'train' ? p.train : p.eval;
        const batch = Math.max(1, input.spec.training.batchSize);
        const handles: OperationHandle<ForwardResult>[] = [];
        for (let i = 0; i * batch < rows.length; i++) {
          const data = rows.slice(i * batch, (i + 1) * batch).map(toDatum);
          handles.push(await provider.submitForwardBackward(input.sessionId, roundKey(input.campaignId, input.round, input.label, `b${i}`), data, { forwardOnly: true }));
          heartbeat(i);
        }
        let lossSum = 0;
        for (const h of handles) {
          lossSum += (await provider.awaitOperation(h, { signal: Context.current().cancellationSignal })).loss;
          heartbeat();
        }
        const tokens = rows.reduce((a, r) => a + r.completionTokens.length, 0);
        return { lossSum, tokens, perToken: lossSum / Math.max(1, tokens) };
      });
    },

    /**
     * Trains one segment: from the cursor, pipelined forward_backward + optim_step per step with deterministic
     * idempotency keys, until the segment's step or time bound. The cursor and the operations in flight are in
     * the heartbeat, so the next attempt resumes there and re-polls them instead of resubmitting.
     */
    async trainSegment(input: SegmentInput): Promise<SegmentResult> {
      const provider = await deps.providerFor(input.spec.provider);
      const ctx = Context.current();
      const t = input.spec.training;
      return atBoundary(async () => {
        const p = await prepared(input.spec, input.data);
        const previous = ctx.info.heartbeatDetails as SegmentHeartbeat | undefined;
        const { maxStep } = await segmentStart(provider, input);
        let confirmed = Math.max(input.cursor.step, previous?.step ?? input.cursor.step);
        const inFlight: SegmentHeartbeat['inFlight'] = previous?.inFlight?.filter((f) => f.step >= confirmed) ?? [];
        let next = inFlight.length ? inFlight[inFlight.length - 1]!.step + 1 : confirmed;
        const deadline = Date.now() + t.segmentSeconds * 1000;
        const losses: { step: number; loss: number; tokens: number }[] = [];
        const report = () => heartbeat({ step: confirmed, inFlight } satisfies SegmentHeartbeat);

        const submit = async (step: number) => {
          const { rows } = batchRows(step, p.train.length, t.batchSize, t.seed);
          const data: Datum[] = rows.map((r) => toDatum(p.train[r]!));
          const lr = learningRateAt(step, input.totalSteps, t.learningRate, t.lrSchedule);
          const fb = await provider.submitForwardBackward(input.sessionId, roundKey(input.campaignId, input.round, `s${step}`, 'forward-backward'), data);
          const opt = await provider.submitOptimStep(input.sessionId, roundKey(input.campaignId, input.round, `s${step}`, 'optim-step'), adamAt(t, lr));
          inFlight.push({ step, fb, opt });
          report();
        };

        const metricTags = { provider: input.spec.provider.kind, campaign_name: input.spec.name };
        const stopper = segmentStopper(deps);
        while (confirmed < maxStep) {
          while (next < maxStep && inFlight.length < t.pipelineDepth && !stopper.stopping() && (Date.now() < deadline || next === confirmed)) {
            await submit(next);
            next += 1;
          }
          if (inFlight.length === 0) break; // out of time, interrupted, or the worker is shutting down
          const head = inFlight[0]!;
          const options = { signal: stopper.signal };
          const fb = await provider.awaitOperation(head.fb, options);
          const opt = await provider.awaitOperation(head.opt, options);
          checkOptimStep(opt, head.step, input.stepOffset);
          inFlight.shift();
          confirmed = head.step + 1;
          const tokens = batchRows(head.step, p.train.length, t.batchSize, t.seed).rows.reduce((a, r) => a + p.train[r]!.completionTokens.length, 0);
          losses.push({ step: confirmed, loss: fb.loss, tokens });
          report();
          recordOptimizerSteps(1, metricTags);
          recordLatestLoss(fb.loss / Math.max(1, tokens), metricTags);
        }
        if (losses.length > 0) {
          fs.mkdirSync(input.stepsDir, { recursive: true });
          writeJsonAtomic(path.join(input.stepsDir, `steps-${String(losses[0]!.step).padStart(7, '0')}.json`), losses);
        }
        return { cursor: { step: confirmed }, ...lossSummary(losses) };
      });
    },

    async saveTrainingCheckpoint(input: { spec: RoundSpec; sessionId: string; key: string }): Promise<{ checkpointId: string; step: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => provider.awaitOperation(await provider.submitTrainingCheckpoint(input.sessionId, input.key), { signal: Context.current().cancellationSignal }));
    },

    async saveSamplerWeights(input: { spec: RoundSpec; sessionId: string; key: string }): Promise<{ checkpointId: string; step: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => provider.awaitOperation(await provider.submitSamplerWeights(input.sessionId, input.key), { signal: Context.current().cancellationSignal }));
    },

    /** Samples an answer for every eval row, scores it, and writes the evaluations file (data stays out of history). */
    async sampleAndScore(input: {
      campaignId: string;
      round: number;
      spec: RoundSpec;
      data: SegmentInput['data'];
      sessionId: string;
      outputPath: string;
      /** Distinguishes the idempotency keys of different sample passes in one round. */
      label: string;
      /** Score this JSONL file's rows instead of the eval set (e.g. the campaign's training pool). */
      dataset?: string;
    }): Promise<{ correct: number; total: number; accuracy: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        const p = await prepared(input.spec, input.data);
        const rowsToScore = input.dataset ? tokenizedFile(input.dataset, p.tokenizer) : p.eval;
        const s = input.spec.sampling;
        const batch = 16;
        const evaluations: { line: number; prompt: string; expected: string; completion: string; match: boolean }[] = [];
        for (let i = 0; i * batch < rowsToScore.length; i++) {
          const rows = rowsToScore.slice(i * batch, (i + 1) * batch);
          const handle = await provider.submitSample(
            input.sessionId,
            roundKey(input.campaignId, input.round, input.label, `b${i}`),
            rows.map((r) => r.promptTokens),
            { maxTokens: s.maxTokens, temperature: s.temperature, topP: s.topP, topK: s.topK, stop: s.stop, seed: input.spec.training.seed + i },
          );
          const results = await provider.awaitOperation(handle, { signal: Context.current().cancellationSignal });
          rows.forEach((row, j) => {
            const tokens = results[j]?.sequences[0]?.tokens ?? [];
            const completion = completionText(p.tokenizer, tokens, s.stop);
            evaluations.push({ line: row.line, prompt: row.prompt, expected: row.answer, completion, match: scoreCompletion(input.spec.evaluation, completion, row.answer) });
          });
          heartbeat(i);
        }
        writeJsonAtomic(input.outputPath, evaluations);
        const correct = evaluations.filter((e) => e.match).length;
        return { correct, total: evaluations.length, accuracy: evaluations.length ? correct / evaluations.length : 0 };
      });
    },

    /** Releases the trainer; idempotent, and fine with a resource that already stopped or failed. */
    async releaseTrainer(input: { spec: RoundSpec; resourceId: string; sessionId?: string }): Promise<{ status: string; resourceId: string }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () => {
        if (input.sessionId) await provider.closeSession(input.sessionId).catch(() => undefined);
        const r = await provider.deactivate(input.resourceId);
        recordResource('released', { provider: input.spec.provider.kind });
        return { status: r.state === 'failed' ? 'already-failed' : 'deactivated', resourceId: input.resourceId };
      });
    },

    /** Writes the round's report atomically, with the evaluations and per-step losses merged in. */
    async writeRoundReport(input: { path: string; report: Record<string, unknown>; evaluationsPath?: string; stepsDir?: string }): Promise<string> {
      const evaluations = input.evaluationsPath && fs.existsSync(input.evaluationsPath) ? JSON.parse(fs.readFileSync(input.evaluationsPath, 'utf8')) : [];
      const steps = input.stepsDir && fs.existsSync(input.stepsDir)
        ? fs.readdirSync(input.stepsDir).filter((f) => f.endsWith('.json')).sort().flatMap((f) => JSON.parse(fs.readFileSync(path.join(input.stepsDir!, f), 'utf8')))
        : [];
      writeJsonAtomic(input.path, { ...input.report, evaluations, steps });
      const { gpu_minutes: gpuMinutes, provider, status } = input.report;
      if (typeof gpuMinutes === 'number') recordRoundGpuMinutes(gpuMinutes, { provider: String(provider), status: String(status) });
      return input.path;
    },
  };
}

/** Rows of a JSONL file, tokenised (for scoring files other than the round's train and eval sets). */
function tokenizedFile(file: string, tokenizer: TextTokenizer): TokenizedRow[] {
  const problems: string[] = [];
  const dataset = readDataset(file, problems);
  if (problems.length) throw new DataValidationError(problems);
  return dataset.rows.map((r) => tokenizeRow(r, tokenizer));
}

/** A resource of this model that appeared since `before` was listed: the one an unanswered create made. */
async function adoptNewResource(provider: TrainingProvider, before: string[], model: string): Promise<string | undefined> {
  const known = new Set(before);
  const fresh = (await provider.listOwnedResources({ activeOnly: true })).filter((r) => !known.has(r.id) && r.model === model);
  return fresh.sort((a, b) => a.createdAt.localeCompare(b.createdAt))[0]?.id;
}

/** The completion as text: up to the first end-of-sequence token or stop string, without them. */
export function completionText(tokenizer: TextTokenizer, tokens: number[], stop?: string[]): string {
  const eos = new Set(tokenizer.eosTokenIds);
  const end = tokens.findIndex((t) => eos.has(t));
  let text = tokenizer.decode(end >= 0 ? tokens.slice(0, end) : tokens, { skipSpecialTokens: true });
  for (const s of stop ?? []) {
    const at = text.indexOf(s);
    if (at >= 0) text = text.slice(0, at);
  }
  return text;
}

export type RoundActivities = ReturnType<typeof createRoundActivities>;

import { joinLocation } from '../config/io/artifacts';
import { RoundhouseFailure } from '../config/rules/failures';
import { lineageParts, roundKey } from '../config/rules/keys';
import { lossPerToken } from '../config/rules/loss-units';
import { pythonLoss, type PythonCall } from '../config/rules/python-calls';
import { lossFiles } from '../config/rules/round-files';
import { ROUND_KIND } from '../config/rules/round-kinds';
import { accumulatedRows } from '../config/rules/schedule';
import type { Datum, TrainingProvider } from '../providers/types';
import type {
  CustomLossEvaluation,
  CustomSegmentInput,
  CustomSegmentResult,
  DpoReferenceInput,
  PhaseInput,
  RoundSpec,
} from '../workflows/round/contract';
import type { TokenizedCompletionRow } from './completion-data';
import { toDatum } from './data';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { readJson } from './files';
import { computeReferenceOnce, requireReference as requireRef, type ReferenceFile as RefFile } from './reference-file';
import { createPreparer, type PreparedCompletions } from './prepare';
import { lossOnPython, type LossBatch, type LossBatchDatum, type LossRecord } from './python';
import { trainSegmentOf, type SegmentContext, type StepKind } from './segment';
import { customGradientStep, passKey } from './custom-steps';
import type { StepRecord } from './step-records';
import { meteredProvider, type TokenUsage } from './usage';
import { Context } from '@temporalio/activity';

/**
 * Custom rounds: the user's loss function (`@roundhouse.loss`, on a Python worker) trained through the dialect's
 * custom-loss pass. One optimizer step is: a keyed `forward` for the target tokens' logprobs (one per accumulated
 * pass), one call of the function over the step's whole batch (recorded in the store under the step's identity), a
 * keyed `custom_forward_backward` per pass with the gradients it returned, and the `optim_step` (activities/segment.ts).
 * A retried attempt gets the same forward back (deduplicated), and the recorded gradients instead of a second call,
 * so its custom forward-backward is the same request under the same key.
 */

export interface CustomStepRecord extends StepRecord {
  /** The loss function's named metrics for the step. */
  metrics?: Record<string, number>;
}

type DatumMeta = Pick<LossBatchDatum, 'row' | 'completion' | 'reference_logprobs'>;

/**
 * Rows' completions as the trainer's datums, and who they are in the loss batch; `reference`: the rows' reference
 * logprobs (per completion, per token), aligned with `rows`.
 */
function rowDatums(rows: TokenizedCompletionRow[], reference?: number[][][]): { datums: Datum[]; meta: DatumMeta[] } {
  const datums: Datum[] = [];
  const meta: DatumMeta[] = [];
  rows.forEach((row, i) =>
    row.completions.forEach((c, j) => {
      datums.push(toDatum({ promptTokens: row.promptTokens, completionTokens: c.tokens }));
      const ref = reference?.[i]?.[j];
      meta.push({ row: i, completion: c.name, ...(ref ? { reference_logprobs: ref } : {}) });
    }),
  );
  return { datums, meta };
}

/** The starting weights' logprobs of every completion (`round.custom.reference: start`), per row, completion, token. */
type ReferenceFile = RefFile<number[][]>;

/** The reference a round computed before its first step, when the spec asks for one. */
async function requireReference(file: string | undefined, data: { trainSha256: string; evalSha256: string }) {
  return file ? requireRef<number[][]>(file, data, 'the round cannot give its loss function the reference') : undefined;
}

/** Rows' datums in forward chunks of `batch` rows each (the same chunks every pass over a set makes). */
function chunked(rows: TokenizedCompletionRow[], datums: Datum[], batch: number, keyOf: (b: number) => string) {
  const chunks: { key: string; datums: Datum[] }[] = [];
  let at = 0;
  for (let b = 0; b * batch < rows.length; b++) {
    const n = rows.slice(b * batch, (b + 1) * batch).reduce((a, r) => a + r.completions.length, 0);
    chunks.push({ key: keyOf(b), datums: datums.slice(at, at + n) });
    at += n;
  }
  return chunks;
}

/** Logprobs per datum as per row, per completion. */
function byRow(rows: TokenizedCompletionRow[], logprobs: number[][]): number[][][] {
  let at = 0;
  return rows.map((r) => r.completions.map(() => logprobs[at++]!));
}

/**
 * Checks of a custom round's data that need its shape, before anything is provisioned: sampled answers need rows with
 * answers, and a pass's sequences (rows × their completions) must fit the model's batch.
 */
export function checkCustomData(spec: RoundSpec, p: PreparedCompletions): void {
  if (spec.evaluation.sampleAnswers === true && p.shape !== 'answer')
    throw new RoundhouseFailure(
      'InvalidInput',
      `evaluation.sampleAnswers: true samples an answer for each eval row to score against its own, but the rows are ${p.shape} (no answer): remove it, or use rows with answers`,
    );
  const widest = Math.max(...p.train.map((r) => r.completions.length), ...p.eval.map((r) => r.completions.length));
  const sequences = spec.training.batchSize * widest;
  if (sequences > p.model.maxBatchSize)
    throw new RoundhouseFailure(
      'InvalidInput',
      `training.batchSize: ${spec.training.batchSize} rows × up to ${widest} completions = ${sequences} sequences per pass, over ${p.model.name}'s maximum batch size of ${p.model.maxBatchSize}: make the batch smaller (training.accumulate keeps the step's size)`,
    );
}

/** The gradients a record holds, checked against the datums they are for; never sent when they do not fit. */
export function checkedGradients(record: LossRecord | undefined, datums: Datum[], name: string, where: string): number[][] {
  const fail = (what: string) => {
    throw new RoundhouseFailure('LossFailed', `loss '${name}' ${where}: ${what}; nothing was sent to the trainer`);
  };
  if (!record?.gradients) return fail('its recorded result has no gradients');
  const g = record.gradients;
  if (!Number.isFinite(record.loss)) fail(`returned a loss of ${record.loss}`);
  if (g.length !== datums.length) fail(`returned gradients for ${g.length} sequences, the batch has ${datums.length}`);
  datums.forEach((d, i) => {
    if (g[i]!.length !== d.targetTokens.length) fail(`datum ${i}: ${g[i]!.length} gradients for ${d.targetTokens.length} tokens`);
    const bad = g[i]!.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) fail(`datum ${i} token ${bad}: a gradient of ${g[i]![bad]}`);
  });
  return g;
}

/** Forward passes of datums in chunks (each keyed), for their target tokens' logprobs. */
async function forwardLogprobs(
  provider: TrainingProvider,
  sessionId: string,
  chunks: { key: string; datums: Datum[] }[],
  signal: AbortSignal,
): Promise<number[][]> {
  const handles = [];
  for (const c of chunks)
    handles.push(await provider.submitForwardBackward(sessionId, c.key, c.datums, { forwardOnly: true, returnLogprobs: true }));
  const out: number[][] = [];
  for (const [i, h] of handles.entries()) {
    const result = await provider.awaitOperation(h, { signal });
    chunks[i]!.datums.forEach((d, j) => out.push(result.logprobs?.[j] ?? d.weights.map(() => 0)));
  }
  return out;
}

const lossBatchOf = (
  mode: LossBatch['mode'],
  step: number | null,
  rows: TokenizedCompletionRow[],
  datums: Datum[],
  meta: Pick<LossBatchDatum, 'row' | 'completion'>[],
  logprobs: number[][],
  context: LossBatch['context'],
): LossBatch => ({
  step,
  mode,
  rows: rows.map((r) => r.fields),
  datums: datums.map((d, i) => ({ ...meta[i]!, logprobs: logprobs[i]!, weights: d.weights })),
  context,
});

const trainedTokens = (datums: Datum[]) => datums.reduce((a, d) => a + d.weights.filter((w) => w !== 0).length, 0);

export function createCustomActivities(deps: ActivityDeps) {
  const { preparedCompletions } = createPreparer(deps);

  return {
    /** Custom-loss steps from the cursor until the segment's step or time bound (activities/segment.ts). */
    async trainCustomSegment(input: CustomSegmentInput): Promise<CustomSegmentResult> {
      return atBoundary(async () => {
        const call = pythonLoss(input.spec);
        if (!call) throw new RoundhouseFailure('InvalidInput', 'round.custom.loss: is required when round.kind is custom');
        const { result, records } = await trainSegmentOf<CustomStepRecord, Record<string, never>>(deps, input, async (ctx) => {
          const p = await preparedCompletions(input.spec, input.data);
          return customStep(input, call, p, await requireReference(input.referencePath, p), ctx);
        });
        const last = records[records.length - 1];
        return { ...result, ...(last?.metrics ? { latestMetrics: last.metrics } : {}) };
      });
    },

    /**
     * `round.custom.reference: start`: the logprobs of every train and eval completion under the round's starting
     * weights, written once before the first step (a retry finds the file; lost after training began, the round fails
     * rather than hand the function another reference). The forwards are chunked and keyed as DPO's reference is.
     */
    async computeCustomReference(input: DpoReferenceInput): Promise<{ path: string; rows: number; usage?: TokenUsage }> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      return atBoundary(async () => {
        const p = await preparedCompletions(input.spec, input.data);
        const signal = Context.current().cancellationSignal;
        const batch = Math.max(1, input.spec.training.batchSize);
        const of = async (which: 'train' | 'eval') => {
          const rows = p[which];
          const { datums } = rowDatums(rows);
          const chunks = chunked(rows, datums, batch, (b) =>
            roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), 'reference', which, `b${b}`),
          );
          const logprobs = await forwardLogprobs(meter.provider, input.sessionId, chunks, signal);
          Context.current().heartbeat();
          return byRow(rows, logprobs);
        };
        await computeReferenceOnce(input, meter.provider, p, of);
        return { path: input.outputPath, rows: p.train.length + p.eval.length, usage: meter.usage() };
      });
    },

    /** The loss function's loss and metrics on the eval set under the session's current weights (forward only). */
    async evaluateCustomLoss(input: PhaseInput & { lossDir: string; referencePath?: string }): Promise<CustomLossEvaluation> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      return atBoundary(async () => {
        const call = pythonLoss(input.spec);
        if (!call) throw new RoundhouseFailure('InvalidInput', 'round.custom.loss: is required when round.kind is custom');
        const p = await preparedCompletions(input.spec, input.data);
        const signal = Context.current().cancellationSignal;
        const batch = Math.max(1, input.spec.training.batchSize);
        const key = (...parts: (string | number)[]) => roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), ...parts);
        const reference = await requireReference(input.referencePath, p);
        const { datums, meta } = rowDatums(p.eval, reference?.eval);
        const chunks = chunked(p.eval, datums, batch, (b) => key(input.label, `b${b}`));
        const logprobs = await forwardLogprobs(meter.provider, input.sessionId, chunks, signal);
        Context.current().heartbeat();
        const result = await lossOnPython({
          call,
          workflowId: `python:${key(input.label, 'loss')}`,
          batchLocation: lossFiles.evalBatch(input.lossDir, input.label, input.lineage, joinLocation),
          recordLocation: lossFiles.evalRecord(input.lossDir, input.label, input.lineage, joinLocation),
          batch: lossBatchOf('eval', null, p.eval, datums, meta, logprobs, {
            evaluation: input.label,
            ...(input.lineage ? { lineage: input.lineage } : {}),
          }),
          signal,
        });
        if (!Number.isFinite(result.loss))
          throw new RoundhouseFailure(
            'LossFailed',
            `loss '${call.name}' on the eval set (${input.label}): returned a loss of ${result.loss}`,
          );
        return { loss: result.loss, metrics: result.metrics, rows: p.eval.length, usage: meter.usage() };
      });
    },
  };
}

/**
 * A custom-loss step for the segment driver. `training.accumulate` passes of `batchSize` rows each: a forward per pass,
 * one call of the function over all of them, and a custom forward-backward per pass; the optimizer step follows.
 */
function customStep(
  input: CustomSegmentInput,
  call: PythonCall,
  p: PreparedCompletions,
  reference: ReferenceFile | undefined,
  ctx: SegmentContext,
): StepKind<CustomStepRecord, Record<string, never>> {
  const { provider, key, signal } = ctx;
  const t = input.spec.training;
  const passes = t.accumulate ?? 1;
  const compute = async (step: number) => {
    const indices = accumulatedRows(step, p.train.length, t.batchSize, passes, t.seed);
    const chunks = indices.map((rows) => rows.map((r) => p.train[r]!));
    const rows = chunks.flat();
    const { datums, meta } = rowDatums(rows, reference && indices.flat().map((r) => reference.train[r]!));
    let start = 0;
    const perPass = chunks.map((chunk, pass) => {
      const n = chunk.reduce((a, r) => a + r.completions.length, 0);
      const slice = { pass, from: start, datums: datums.slice(start, start + n) };
      start += n;
      return slice;
    });
    const logprobs = await forwardLogprobs(
      provider,
      input.sessionId,
      perPass.map((s) => ({ key: passKey(key, step, s.pass, 'forward'), datums: s.datums })),
      signal,
    );
    const lineage = input.lineage ?? 0;
    const recordLocation = lossFiles.stepRecord(input.lossDir, step, lineage, joinLocation);
    const result = await lossOnPython({
      call,
      workflowId: `python:${key(`s${step}`, 'loss')}`,
      batchLocation: lossFiles.stepBatch(input.lossDir, step, lineage, joinLocation),
      recordLocation,
      batch: lossBatchOf('train', step, rows, datums, meta, logprobs, { step: step + 1, ...(lineage ? { lineage } : {}) }),
      signal,
    });
    const gradients = checkedGradients(await readJson<LossRecord>(result.record), datums, call.name, `at step ${step + 1}`);
    const tokens = trainedTokens(datums);
    const record: CustomStepRecord = {
      step: step + 1,
      loss: result.loss,
      tokens,
      lossPerToken: lossPerToken(input.spec.provider.kind, ROUND_KIND.custom.stepLoss(input.spec.round), result.loss, tokens),
      ...(Object.keys(result.metrics).length ? { metrics: result.metrics } : {}),
    };
    return { passes: perPass.map((s) => ({ datums: s.datums, gradients: gradients.slice(s.from, s.from + s.datums.length) })), record };
  };
  return customGradientStep(ctx, input.sessionId, compute);
}

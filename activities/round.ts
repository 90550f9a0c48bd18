import { Context } from '@temporalio/activity';
import { RoundhouseFailure } from '../config/rules/failures';
import { planSteps } from '../config/rules/schedule';
import { drawSeed, stopToSend } from '../config/rules/sampling';
import { maskSecretsIn } from '../config/io/secrets';
import type { ForwardResult, OperationHandle } from '../providers/types';
import type { Rollback } from '../config/rules/lineage';
import type { PhaseInput, RoundData, RoundInput, RoundPlan, RoundSpec, SpendGuard } from '../workflows/round/contract';
import { toDatum } from './data';
import { checkCustomData } from './custom';
import { joinLocation } from '../config/io/artifacts';
import { scoreOnPython } from './python';
import { pythonScorer } from '../config/rules/python-calls';
import { descriptorOf } from '../config/rules/round-kinds';
import { generatorReplicasOf, generatorReplicasProblem, stepBatchProblem } from '../config/rules/trainer-shape';
import type { ScoreResult } from '../workflows/python/contract';
import type { ActivityDeps } from './deps';
import { roundCheckpoints } from './checkpoints';
import type { RoundReport, RoundReportFields } from '../config/io/round-report';
import { trackingTarget, trackRoundEnd, type RoundTracking } from './tracking';
import { atBoundary, keepingAlive, toActivityFailure } from './failures';
import { readJson, writeJsonAtomic } from './files';
import { lineageParts, roundKey } from '../config/rules/keys';
import { recordRoundGpuMinutes } from './metrics';
import { checkSessionCapacity, createPreparer, tokenizedFile } from './prepare';
import { rewardFunction } from './rewards';
import { evaluationSampling } from '../config/rules/evaluation-sampling';
import { drawAnswers, evaluationsOf, type SampledAnswer } from './evaluation-draw';
import { meteredProvider, type TokenUsage } from './usage';
import { budgetPricing } from './budget';
import { readStepRecords } from './step-records';
import { scoreFiles } from '../config/rules/round-files';

/**
 * The round's phases around training: the checks before provisioning, loss measured forward-only, checkpoints,
 * sampling and scoring, and the report. Provisioning and release are in trainer.ts; training segments in segment.ts
 * and the kinds' files (sft.ts, grpo.ts, dpo.ts).
 */
/** File system errors no retry cures. */
const UNWRITABLE = new Set(['EISDIR', 'ENOTDIR', 'EACCES', 'EPERM', 'EROFS']);

export function createRoundActivities(deps: ActivityDeps) {
  const { modelInfo, prepared, preparedPairs, preparedCompletions } = createPreparer(deps);
  /** The round's data prepared as its kind reads it: rows, or preference pairs. */
  const preparedOfShape = (spec: RoundSpec, data: RoundInput['data']) => {
    const shape = descriptorOf(spec).data;
    switch (shape) {
      case 'rows':
        return prepared(spec, data);
      case 'pairs':
        return preparedPairs(spec, data);
      case 'completions':
        return preparedCompletions(spec, data).then((p) => {
          checkCustomData(spec, p);
          return p;
        });
      default: {
        const unknown: never = shape;
        throw new Error(`no data of shape ${String(unknown)}`);
      }
    }
  };

  return {
    /** Every check that can be made before provisioning: schema was checked by the caller; data, tokens, model here. */
    async prepareRound(input: Pick<RoundInput, 'spec' | 'data' | 'budget'>): Promise<RoundPlan> {
      return atBoundary(async () => {
        const p = await preparedOfShape(input.spec, input.data);
        const provider = await deps.providerFor(input.spec.provider);
        // Asked afresh: the prepared data is cached by content, and its model info with it, whichever provider it came from.
        checkSessionCapacity(input.spec, await modelInfo(provider, input.spec.provider));
        const reward = input.spec.round?.grpo?.reward;
        if (reward?.kind === 'module') {
          try {
            rewardFunction(reward); // loads it now: a bad module fails the round before anything is provisioned
          } catch (err) {
            throw new RoundhouseFailure(
              'InvalidInput',
              `round.grpo.reward.path: ${reward.path} does not load: ${(err as Error).message.split('\n')[0]}`,
            );
          }
        }
        // The trainer's shape: a generator where the round samples, and a step's batch within the model's limit.
        const generatorProblem = generatorReplicasProblem(input.spec);
        if (generatorProblem) throw new RoundhouseFailure('InvalidInput', `provider.generatorReplicas: ${generatorProblem}`);
        const batchProblem = stepBatchProblem(input.spec, p.model);
        if (batchProblem) throw new RoundhouseFailure('InvalidInput', batchProblem);
        const t = input.spec.training;
        const plan = planSteps(p.train.length, t.batchSize * (t.accumulate ?? 1), t.epochs);
        const quote = await provider.estimateCost?.(input.spec.provider.model, generatorReplicasOf(input.spec)).catch(() => undefined);
        const pricePerHour = quote?.currency === 'USD' ? quote.pricePerHour : undefined;
        const pricing = budgetPricing({
          spec: input.spec,
          budget: input.budget,
          gpuCount: p.model.gpuCount ?? 1,
          quotePerHour: pricePerHour,
          data: p,
        });
        return {
          pricePerHour,
          ...(pricing ? { pricing } : {}),
          trainSha256: p.trainSha256,
          evalSha256: p.evalSha256,
          trainRows: p.train.length,
          evalRows: p.eval.length,
          ...plan,
          gpuCount: p.model.gpuCount ?? 1,
        };
      });
    },

    /** Cross-entropy of the answers of a dataset, forward only (no gradient): the baseline and trained loss. */
    async measureLoss(
      input: PhaseInput & { which: 'train' | 'eval' },
    ): Promise<{ lossSum: number; tokens: number; perToken: number; usage: TokenUsage }> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      const provider = meter.provider;
      return atBoundary(async () => {
        const p = await prepared(input.spec, input.data);
        const rows = input.which === 'train' ? p.train : p.eval;
        const batch = Math.max(1, input.spec.training.batchSize);
        const handles: OperationHandle<ForwardResult>[] = [];
        for (let i = 0; i * batch < rows.length; i++) {
          const data = rows.slice(i * batch, (i + 1) * batch).map(toDatum);
          handles.push(
            await provider.submitForwardBackward(
              input.sessionId,
              roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), input.label, `b${i}`),
              data,
              {
                forwardOnly: true,
              },
            ),
          );
          Context.current().heartbeat(i);
        }
        let lossSum = 0;
        for (const h of handles) {
          lossSum += (await provider.awaitOperation(h, { signal: Context.current().cancellationSignal })).loss;
          Context.current().heartbeat();
        }
        const tokens = rows.reduce((a, r) => a + r.completionTokens.length, 0);
        return { lossSum, tokens, perToken: lossSum / Math.max(1, tokens), usage: meter.usage() };
      });
    },

    async saveTrainingCheckpoint(input: {
      spec: RoundSpec;
      sessionId: string;
      key: string;
    }): Promise<{ checkpointId: string; step: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () =>
        provider.awaitOperation(await provider.submitTrainingCheckpoint(input.sessionId, input.key), {
          signal: Context.current().cancellationSignal,
        }),
      );
    },

    async saveSamplerWeights(input: { spec: RoundSpec; sessionId: string; key: string }): Promise<{ checkpointId: string; step: number }> {
      const provider = await deps.providerFor(input.spec.provider);
      return atBoundary(async () =>
        provider.awaitOperation(await provider.submitSamplerWeights(input.sessionId, input.key), {
          signal: Context.current().cancellationSignal,
        }),
      );
    },

    /** Samples an answer for every eval row, scores it, and writes the evaluations file (data stays out of history). */
    async sampleAndScore(input: {
      campaignId: string;
      round: number;
      spec: RoundSpec;
      data: RoundData;
      sessionId: string;
      outputPath: string;
      /** Distinguishes the idempotency keys of different sample passes in one round. */
      label: string;
      /** After a rollback: the lineage its keys carry. */
      lineage?: number;
      /** Score this JSONL file's rows instead of the eval set (e.g. the campaign's training pool)... */
      dataset?: string;
      /** ...or the round's test set (`data.test`, checked with train and eval before the round provisioned). */
      which?: 'test';
      /** A dollar budget on a provider that bills tokens: each sampling request is priced before it is sent. */
      spend?: SpendGuard;
    }): Promise<{
      /** Right answers (of total × n). */
      correct: number;
      /** Rows scored. */
      total: number;
      /** pass@1: the share of answers right (python scorer: their mean score). */
      accuracy: number;
      /** With `evaluation.sampling.n` > 1: pass@n, the unbiased estimate averaged over the rows. */
      passAtK?: { k: number; value: number };
      unscorable?: number;
      usage: TokenUsage;
      sha256?: string;
    }> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      const provider = meter.provider;
      return atBoundary(async () => {
        const p = await prepared(input.spec, input.data);
        if (input.which === 'test' && !p.test) throw new RoundhouseFailure('InvalidInput', 'data.test: the round has no test set');
        const rowsToScore = input.which === 'test' ? p.test! : input.dataset ? await tokenizedFile(input.dataset, p.tokenizer) : p.eval;
        const sampling = evaluationSampling(input.spec);
        const answers = await drawAnswers({
          provider,
          sessionId: input.sessionId,
          keyOf: (part) => roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), input.label, `p${part}`),
          rows: rowsToScore,
          tokenizer: p.tokenizer,
          sampling,
          stopSent: stopToSend(input.spec.provider.kind, p.model, sampling.stop),
          seedOf: (part) => drawSeed(input.spec, (base) => base + part),
          evaluation: input.spec.evaluation,
        });
        const python = await scoreOnPythonScorer(input, answers, sampling.n);
        const { evaluations, correct, accuracy, passAtK } = evaluationsOf(answers, sampling.n, python !== undefined);
        await writeJsonAtomic(input.outputPath, evaluations);
        return {
          correct,
          total: evaluations.length,
          accuracy,
          ...(passAtK ? { passAtK } : {}),
          ...(python?.unscorable ? { unscorable: python.unscorable } : {}),
          usage: meter.usage(),
          ...(input.which === 'test' ? { sha256: p.testSha256 } : {}),
        };
      });
    },

    /** Writes the round's report atomically, with the evaluations and per-step losses merged in. */
    async writeRoundReport(input: RoundReportInput): Promise<string> {
      return keepingAlive(() => writeRoundReport(input));
    },
  };
}

interface RoundReportInput {
  path: string;
  report: RoundReportFields;
  evaluationsPath?: string;
  stepsDir?: string;
  /** Rollbacks: step records of abandoned lineages past each rollback point are not the kept weights'. */
  rollbacks?: Rollback[];
  /** The round, for the experiment tracker (absent in rounds recorded before tracking existed). */
  track?: RoundTracking & { totalSteps: number };
}

async function writeRoundReport(input: RoundReportInput): Promise<string> {
  const evaluations = (input.evaluationsPath && (await readJson<RoundReport['evaluations']>(input.evaluationsPath))) || [];
  const steps = input.stepsDir ? await readStepRecords(input.stepsDir, input.rollbacks) : [];
  // Secrets masked once here: the report goes to the store and, with tracking, to MLflow as an artifact.
  const report: RoundReport = { ...input.report, checkpoints: roundCheckpoints(input.report), evaluations, steps };
  const full = maskSecretsIn(report);
  try {
    await writeJsonAtomic(input.path, full);
  } catch (err) {
    // A path that cannot take a file will not on a retry either: say so at once (the round keeps its result).
    const code = (err as NodeJS.ErrnoException).code;
    if (code && UNWRITABLE.has(code))
      throw toActivityFailure(new RoundhouseFailure('InvalidInput', `cannot write the round report ${input.path}: ${code}`));
    throw err;
  }
  const { gpu_minutes: gpuMinutes, provider, status } = input.report;
  recordRoundGpuMinutes(gpuMinutes, { provider, status });
  if (input.track && trackingTarget(input.track.spec)) {
    const name = input.path.slice(input.path.lastIndexOf('/') + 1);
    await trackRoundEnd(
      { ...input.track, stepsDir: input.stepsDir, rollbacks: input.rollbacks },
      input.report,
      `${JSON.stringify(full, null, 2)}\n`,
      name,
    );
  }
  return input.path;
}

export type RoundActivities = ReturnType<typeof createRoundActivities>;

/**
 * With a python scorer (`evaluation.scorer: { kind: python }`): every answer scored on its Python worker (each of a
 * row's n answers on its own), each score recorded under the round's `scores/` (a retried pass reads them back). An
 * answer counts as right at a score of 0.5 or more (bool scores: True), which is what the `mistakes` policy reads.
 */
async function scoreOnPythonScorer(
  input: { campaignId: string; round: number; lineage?: number; label: string; outputPath: string; spec: RoundSpec },
  answers: SampledAnswer[],
  n: number,
): Promise<ScoreResult | undefined> {
  const call = pythonScorer(input.spec);
  if (!call) return undefined;
  const dir = scoreFiles.folder(input.outputPath, joinLocation);
  const pass = scoreFiles.pass(input.label, input.lineage);
  const scored = await scoreOnPython({
    role: 'scorer',
    call,
    workflowId: `python:${roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), input.label, 'scores')}`,
    itemsLocation: scoreFiles.batch(dir, pass, joinLocation),
    recordsDir: dir,
    items: answers.map(({ row, sample, completion }) => ({
      // With n = 1 the keys rounds always had.
      key: `${pass}/l${row.line}${n > 1 ? `/s${sample}` : ''}`,
      completion,
      answer: row.answer,
      prompt: row.prompt,
      row: row.fields ?? { prompt: row.prompt, answer: row.answer },
      context: { pass: input.label, line: row.line, ...(n > 1 ? { sample } : {}) },
    })),
    signal: Context.current().cancellationSignal,
  });
  answers.forEach((a, i) => {
    a.score = scored.values[i] ?? null;
    a.match = a.score !== null && a.score >= 0.5;
  });
  return scored;
}

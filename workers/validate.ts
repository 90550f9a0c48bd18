import { randomUUID } from 'node:crypto';
import { ROUND_KIND } from '../config/rules/round-kinds';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { localCopy } from '../config/io/artifacts';
import { DataValidationError } from '../config/rules/errors';
import type { CampaignSpec } from '../config/io/spec';
import { bundledTokenizerFiles, huggingFaceCacheDir, tokenizerFor } from '../config/io/tokenizer';
import {
  heldOutProblems,
  loadPreferenceData,
  nearDuplicateWarning,
  loadRoundData,
  readDataset,
  readPreferenceDataset,
  testSetProblems,
} from '../activities/data';
import { loadCompletionData, readCompletionDataset } from '../activities/completion-data';
import { rewardFunction } from '../activities/rewards';
import { findModel } from '../emulator/models';
import { abilitiesOf } from '../config/rules/dialects';
import { stageSpecOf } from '../config/rules/stages';
import { stepBatchProblem } from '../config/rules/trainer-shape';
import { campaignPythonChecks, workerVariablesOf } from '../config/rules/preflight';
import { campaignChecksWorkflow } from '../workflows/preflight';

/** The spec with its data (every stage's) as local files (S3 objects downloaded), for validation before anything starts. */
export async function withLocalData(spec: CampaignSpec): Promise<CampaignSpec> {
  const local = async <T extends { train: string; eval: string; test?: string }>(data: T): Promise<T> => ({
    ...data,
    train: await localCopy(data.train),
    eval: await localCopy(data.eval),
    ...(data.test ? { test: await localCopy(data.test) } : {}),
  });
  const stages = spec.stages && (await Promise.all(spec.stages.map(async (s) => ({ ...s, data: await local(s.data) }))));
  return { ...spec, data: stages ? stages[0]!.data : await local(spec.data), ...(stages ? { stages } : {}) };
}

/**
 * The checks `roundhouse run` makes before starting anything (the round repeats them on the worker): every stage
 * checked as the one spec its rounds run with (a campaign without stages is one): the data's rows and overlap always;
 * the reward module; the model and token limits where they can be known here (the emulator's models, a tokenizer on
 * disk). Throws DataValidationError naming file, line and field, and the stage when there are stages.
 */
export function validateCampaignLocally(spec: CampaignSpec): {
  trainRows: number;
  evalRows: number;
  tokenized: boolean;
  warnings: string[];
} {
  const stages = spec.stages ?? [undefined];
  const checks = stages.map((stage, i) => {
    const one = stageSpecOf(spec, i);
    const label = stage ? `stage ${i + 1} (${stage.name}): ` : '';
    let checked: ReturnType<typeof checkCampaign>;
    try {
      checked = checkCampaign(one);
    } catch (err) {
      if (err instanceof DataValidationError && label) throw new DataValidationError(err.problems.map((p) => `${label}${p}`));
      throw err;
    }
    // Warnings after the errors: data that trains fine but may mislead (eval rows that repeat training sentences).
    const problems: string[] = [];
    const shape = ROUND_KIND[one.round.kind].data;
    const read = shape === 'pairs' ? readPreferenceDataset : shape === 'completions' ? readCompletionDataset : readDataset;
    const train = read(one.data.train, problems);
    const warnings = [nearDuplicateWarning(train, read(one.data.eval, problems))];
    if (one.data.test) warnings.push(nearDuplicateWarning(train, read(one.data.test, problems), 'test'));
    return { ...checked, warnings: warnings.filter((w): w is string => Boolean(w)).map((w) => `${label}${w}`) };
  });
  return {
    trainRows: checks.reduce((a, c) => a + c.trainRows, 0),
    evalRows: checks.reduce((a, c) => a + c.evalRows, 0),
    tokenized: checks.every((c) => c.tokenized),
    warnings: checks.flatMap((c) => c.warnings),
  };
}

function checkCampaign(spec: CampaignSpec): { trainRows: number; evalRows: number; tokenized: boolean } {
  const { embedded } = abilitiesOf(spec.provider.kind);
  if (embedded && !spec.provider.baseUrl && !findModel(spec.provider.model)) {
    throw new DataValidationError([`provider.model: '${spec.provider.model}' is not one of the emulator's models`]);
  }
  const emulated = embedded ? findModel(spec.provider.model) : undefined;
  const batchProblem = emulated && stepBatchProblem(spec, emulated);
  if (batchProblem) throw new DataValidationError([batchProblem]);
  const reward = spec.round.grpo?.reward;
  if (reward?.kind === 'module') {
    try {
      rewardFunction(reward);
    } catch (err) {
      throw new DataValidationError([`round.grpo.reward.path: ${(err as Error).message.split('\n')[0]}`]);
    }
  }
  const hasTokenizer = Boolean(
    spec.provider.tokenizer ?? bundledTokenizerFiles(spec.provider.model) ?? huggingFaceCacheDir(spec.provider.model),
  );
  const limits = { maxSeqLen: spec.training.maxSeqLen, modelMaxSeqLen: findModel(spec.provider.model)?.maxSeqLen };
  const shape = ROUND_KIND[spec.round.kind].data;
  if (shape === 'pairs' && spec.data.test)
    throw new DataValidationError([
      `data.test: a held-out test set is scored by sampled answers (sft and grpo rounds); ${ROUND_KIND[spec.round.kind].aRound} has none yet: remove it`,
    ]);
  if (shape === 'pairs') {
    if (hasTokenizer) {
      const pairs = loadPreferenceData(
        spec.data.train,
        spec.data.eval,
        tokenizerFor(spec.provider.model, undefined, spec.provider.tokenizer),
        limits,
      );
      return { trainRows: pairs.train.length, evalRows: pairs.eval.length, tokenized: true };
    }
    const problems: string[] = [];
    const train = readPreferenceDataset(spec.data.train, problems);
    const evalSet = readPreferenceDataset(spec.data.eval, problems);
    if (problems.length) throw new DataValidationError(problems);
    return { trainRows: train.rows.length, evalRows: evalSet.rows.length, tokenized: false };
  }
  if (shape === 'completions') {
    if (hasTokenizer) {
      const data = loadCompletionData(
        spec.data.train,
        spec.data.eval,
        tokenizerFor(spec.provider.model, undefined, spec.provider.tokenizer),
        limits,
      );
      if (spec.evaluation.sampleAnswers === true && data.shape !== 'answer')
        throw new DataValidationError([
          `evaluation.sampleAnswers: true samples an answer for each eval row to score against its own, but ${spec.data.eval}'s rows are ${data.shape} (no answer)`,
        ]);
      return { trainRows: data.train.length, evalRows: data.eval.length, tokenized: true };
    }
    const problems: string[] = [];
    const train = readCompletionDataset(spec.data.train, problems);
    const evalSet = readCompletionDataset(spec.data.eval, problems);
    problems.push(...heldOutProblems(train, evalSet));
    if (problems.length) throw new DataValidationError(problems);
    return { trainRows: train.rows.length, evalRows: evalSet.rows.length, tokenized: false };
  }
  if (hasTokenizer) {
    const tokenizer = tokenizerFor(spec.provider.model, undefined, spec.provider.tokenizer);
    const data = loadRoundData(spec.data.train, spec.data.eval, tokenizer, limits, spec.data.test);
    return { trainRows: data.train.rows.length, evalRows: data.eval.rows.length, tokenized: true };
  }
  const problems: string[] = [];
  const train = readDataset(spec.data.train, problems);
  const evalSet = readDataset(spec.data.eval, problems);
  problems.push(...heldOutProblems(train, evalSet));
  if (spec.data.test) problems.push(...testSetProblems(train, evalSet, readDataset(spec.data.test, problems)));
  if (problems.length) throw new DataValidationError(problems);
  return { trainRows: train.rows.length, evalRows: evalSet.rows.length, tokenized: false };
}

/** How `checkOnWorker` ended: passed, refused (the failure's type and message), or not made (why, as a warning). */
export type WorkerCheckOutcome = { passed: true } | { refused: { type: string; message: string } } | { warning: string };

/**
 * The checks only a worker can make, asked on the campaign's task queue before `run` or `schedule create` starts
 * anything (campaignChecksWorkflow): every stage's Python functions, environments (loaded with their args) and task
 * queues, and the worker variables the spec names. The campaign makes them again before its first round, so when no
 * worker takes them within `pickupMs` the command is not held: it is told why, as a warning.
 */
export async function checkOnWorker(
  client: Client,
  options: { taskQueue: string; spec: CampaignSpec; id: string; pickupMs?: number },
): Promise<WorkerCheckOutcome> {
  // A spec with no Python call and no worker variable has nothing only a worker can check: no round trip, no wait.
  if (!campaignPythonChecks(options.spec).length && !workerVariablesOf(options.spec).length) return { passed: true };
  const handle = await client.workflow.start(campaignChecksWorkflow, {
    taskQueue: options.taskQueue,
    workflowId: `checks:${options.id}:${randomUUID().slice(0, 8)}`,
    args: [options.spec],
  });
  const deadline = Date.now() + (options.pickupMs ?? 10_000);
  for (;;) {
    const history = await handle.fetchHistory();
    if (history.events?.some((e) => e.workflowTaskStartedEventAttributes)) break;
    if (Date.now() >= deadline) {
      await handle.terminate('no worker took the checks').catch(() => undefined);
      const variables = workerVariablesOf(options.spec).map((v) => v.name);
      return {
        warning:
          `no worker on task queue '${options.taskQueue}' took the spec's checks within ${Math.round((options.pickupMs ?? 10_000) / 1000)} s ` +
          `(Python functions, environments${variables.length ? `, the worker's ${variables.join(', ')}` : ''}): the campaign makes them before its first round`,
      };
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  try {
    await handle.result();
    return { passed: true };
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    let cause: Error | undefined = err.cause;
    while (cause?.cause instanceof Error) cause = cause.cause;
    return { refused: { type: (cause as { type?: string } | undefined)?.type ?? 'Failed', message: cause?.message ?? err.message } };
  }
}

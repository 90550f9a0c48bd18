import type { ProviderSpec } from '../config/io/spec';
import { localCopy } from '../config/io/artifacts';
import { DataValidationError } from '../config/rules/errors';
import { RoundhouseFailure } from '../config/rules/failures';
import { tokenizerFor, type TextTokenizer } from '../config/io/tokenizer';
import type { ModelInfo, TrainingProvider } from '../providers/types';
import type { RoundInput, RoundSpec } from '../workflows/round/contract';
import { loadCompletionData, type CompletionShape, type TokenizedCompletionRow } from './completion-data';
import { loadPreferenceData, loadRoundData, readDataset, sha256File, tokenizeRow, type TokenizedPair, type TokenizedRow } from './data';
import type { ActivityDeps } from './deps';

/**
 * Data preparation shared by every round kind: the model's limits from the provider, the data loaded, checked and
 * tokenised (cached per file hash, so a worker prepares a round's data once), and the hashes the workflow recorded
 * checked again.
 */
export interface PreparedData {
  tokenizer: TextTokenizer;
  model: ModelInfo;
  train: TokenizedRow[];
  eval: TokenizedRow[];
  /** `data.test`: scored only for the final assessment, never for a choice. */
  test?: TokenizedRow[];
  trainSha256: string;
  evalSha256: string;
  testSha256?: string;
}

export interface PreparedPairs {
  tokenizer: TextTokenizer;
  model: ModelInfo;
  train: TokenizedPair[];
  eval: TokenizedPair[];
  trainSha256: string;
  evalSha256: string;
}

export interface PreparedCompletions {
  tokenizer: TextTokenizer;
  model: ModelInfo;
  shape: CompletionShape;
  train: TokenizedCompletionRow[];
  eval: TokenizedCompletionRow[];
  trainSha256: string;
  evalSha256: string;
}

/** Datasets kept tokenised per worker, least recently used dropped first (a long-lived worker sees many). */
const PREPARED_CACHE_ENTRIES = 32;
const preparedCache = new Map<string, PreparedData>();
const preparedPairsCache = new Map<string, PreparedPairs>();
const preparedCompletionsCache = new Map<string, PreparedCompletions>();

export function createPreparer(deps: ActivityDeps) {
  const modelInfo = async (provider: TrainingProvider, spec: ProviderSpec): Promise<ModelInfo> => {
    const models = await provider.supportedModels();
    const model = models.find((m) => m.name === spec.model);
    if (!model) {
      throw new RoundhouseFailure(
        'InvalidInput',
        `provider.model: '${spec.model}' is not supported by ${provider.kind}; supported: ${models.map((m) => m.name).join(', ')}`,
      );
    }
    return model;
  };

  /** Loads, validates and tokenises prompt/answer rows, cached per file hash. */
  const prepared = async (spec: RoundSpec, data: RoundInput['data']): Promise<PreparedData> =>
    cachedLoad(preparedCache, spec, data, (tokenizer, limits, files) => {
      const loaded = loadRoundData(files.train, files.eval, tokenizer, limits, files.test);
      return { train: loaded.train.rows, eval: loaded.eval.rows, ...(loaded.test ? { test: loaded.test.rows } : {}) };
    });

  /** DPO's preference pairs, checked and cached the same way. */
  const preparedPairs = async (spec: RoundSpec, data: RoundInput['data']): Promise<PreparedPairs> =>
    cachedLoad(preparedPairsCache, spec, data, (tokenizer, limits, files) => {
      const loaded = loadPreferenceData(files.train, files.eval, tokenizer, limits);
      return { train: loaded.train, eval: loaded.eval };
    });

  /** A custom round's rows of named completions, checked and cached the same way. */
  const preparedCompletions = async (spec: RoundSpec, data: RoundInput['data']): Promise<PreparedCompletions> =>
    cachedLoad(preparedCompletionsCache, spec, data, (tokenizer, limits, files) => {
      const loaded = loadCompletionData(files.train, files.eval, tokenizer, limits);
      return { train: loaded.train, eval: loaded.eval, shape: loaded.shape };
    });

  async function cachedLoad<T extends { train: unknown[]; eval: unknown[] }>(
    cache: Map<string, T & Omit<PreparedData, 'train' | 'eval'>>,
    spec: RoundSpec,
    given: RoundInput['data'],
    load: (
      tokenizer: TextTokenizer,
      limits: { maxSeqLen: number; modelMaxSeqLen: number },
      files: { train: string; eval: string; test?: string },
    ) => T,
  ): Promise<T & Omit<PreparedData, 'train' | 'eval'>> {
    const provider = await deps.providerFor(spec.provider);
    const model = await modelInfo(provider, spec.provider);
    // Checked on every call, against this provider's model: a cached tokenising may have been made for another.
    checkLoraRank(spec, model);
    // Data in the artifact store (s3://) is read from a local copy; its hash is checked like a local file's.
    const data = {
      ...given,
      train: await localCopy(given.train),
      eval: await localCopy(given.eval),
      ...(given.test ? { test: await localCopy(given.test) } : {}),
    };
    const { trainSha256, evalSha256 } = checkHashes(data);
    const testSha256 = data.test === undefined ? undefined : sha256File(data.test);
    // By content, not path: rounds of a sweep whose files hold the same bytes share one tokenising.
    const key = [
      trainSha256,
      evalSha256,
      testSha256 ?? '',
      spec.provider.model,
      spec.provider.tokenizer ?? '',
      spec.training.maxSeqLen,
    ].join('|');
    const cached = cache.get(key);
    if (cached) {
      cache.delete(key); // most recently used last
      cache.set(key, cached);
      return { ...cached, model };
    }
    const tokenizer = tokenizerFor(spec.provider.model, model.tokenizer, spec.provider.tokenizer);
    const loaded = load(tokenizer, { maxSeqLen: spec.training.maxSeqLen, modelMaxSeqLen: model.maxSeqLen }, data);
    const result = { tokenizer, model, ...loaded, trainSha256, evalSha256, ...(testSha256 ? { testSha256 } : {}) };
    cache.set(key, result);
    if (cache.size > PREPARED_CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
    return result;
  }

  return { modelInfo, prepared, preparedPairs, preparedCompletions };
}

function checkHashes(data: RoundInput['data']): { trainSha256: string; evalSha256: string } {
  const trainSha256 = sha256File(data.train);
  const evalSha256 = sha256File(data.eval);
  for (const [which, expected, actual] of [
    ['train', data.trainSha256, trainSha256],
    ['eval', data.evalSha256, evalSha256],
  ] as const) {
    if (expected && expected !== actual) {
      throw new RoundhouseFailure(
        'InvalidInput',
        `data.${which}: ${data[which]} changed since the round started (sha256 ${actual.slice(0, 12)}…, expected ${expected.slice(0, 12)}…)`,
      );
    }
  }
  return { trainSha256, evalSha256 };
}

function checkLoraRank(spec: RoundSpec, model: ModelInfo): void {
  if (model.maxLoraRank !== undefined && spec.training.loraRank > model.maxLoraRank) {
    throw new RoundhouseFailure(
      'InvalidInput',
      `training.loraRank: ${spec.training.loraRank} is over ${model.name}'s maximum of ${model.maxLoraRank}`,
    );
  }
}

/**
 * The sessions a round holds on its trainer at once (GRPO with a KL penalty: the policy and its frozen reference)
 * within the model's cap on concurrent sessions per resource, where the provider says it (Together: a 429 past it).
 */
export function checkSessionCapacity(spec: RoundSpec, model: ModelInfo): void {
  const reference = spec.round?.grpo?.reference;
  const capacity = model.adapterCapacity;
  if (!reference || capacity === undefined || capacity >= 2) return;
  throw new RoundhouseFailure(
    'InvalidInput',
    `round.grpo.reference: ${reference} opens a second session (the frozen reference) on the trainer, but ${model.name} accepts ${capacity} concurrent session per resource; set beta: 0 without a reference, or choose another model`,
  );
}

/** Rows of a JSONL file, tokenised (for scoring files other than the round's train and eval sets). */
export async function tokenizedFile(location: string, tokenizer: TextTokenizer): Promise<TokenizedRow[]> {
  const problems: string[] = [];
  const dataset = readDataset(await localCopy(location), problems);
  if (problems.length) throw new DataValidationError(problems);
  return dataset.rows.map((r) => tokenizeRow(r, tokenizer));
}

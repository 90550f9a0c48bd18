import { hashString } from './random';

/** A base model the emulator can host. Real models' names and vocabulary sizes; a seeded stand-in behind each. */
export interface EmulatedModel {
  name: string;
  vocabSize: number;
  maxSeqLen: number;
  maxLoraRank: number;
  maxBatchSize: number;
  gpuType: 'H100-80GB' | 'B200-SXM';
  /** GPUs a resource of this model holds (billing is per GPU). */
  gpuCount: number;
  /** USD per GPU-hour while a resource of it is ready: what the GPU-time dialects bill and Together's estimate-cost quotes. */
  pricePerGpuHour: number;
  /** USD per million tokens: what the Tinker dialect bills instead of GPU time. */
  tokenPrices: TokenPrices;
  contextLength: number;
  /** Hugging Face tokenizer repository the real model uses (clients tokenise with it). */
  tokenizer: string;
  /** Seed of the frozen stand-in base model. */
  seed: number;
  /** The folder of emulator/models/ holding the tokenizer that ships for this model (tokenizer.json or .json.gz). */
  tokenizerFolder?: string;
  /** Tokens that end generation (models whose tokenizer ships with the emulator: their generation_config.json's). */
  eosTokenIds?: number[];
  /**
   * Concurrent sessions a LoRA resource of this model accepts (Together: "up to five concurrent sessions by default, and
   * fewer for some models"; a full-weight resource accepts one). It stands in for the supported-models catalog's
   * "adapter capacity" column, whose per-model figures our sources do not give.
   */
  loraSessionCap: number;
  /**
   * Whether Together's sampler takes stop strings for this model. Together's guide (as issue #44 quotes it): for
   * models without stop-string support, omit `stop` and truncate in your code; an unsupported stop string fails as
   * invalid input. Which models those are is the supported-models catalog table's to say (its column was not seen:
   * docs/research/provider-caveats-2026-12.md §2); the emulator has models of both kinds.
   */
  stopStrings: boolean;
}

/** USD per million tokens: prefill (prompts, forward-only passes), sample (generated), train (forward-backward). */
export interface TokenPrices {
  prefill: number;
  sample: number;
  train: number;
}

/**
 * Tinker's list price for Qwen3-8B, as third parties transcribed Tinker's pricing page (Jan 2026). Every other model's
 * `tokenPrices` is the emulator's stand-in (no published price in our sources): this one scaled by parameter count, to
 * the cent (2B a quarter, 4B a half, 20B 2.5×, 27B 27/8×; tiny-chat the smallest).
 */
const QWEN3_8B_TOKEN_PRICES: TokenPrices = { prefill: 0.13, sample: 0.4, train: 0.4 };

/** Together's documented default of concurrent LoRA sessions per resource (docs.together.ai post-training/multi-lora). */
export const DEFAULT_LORA_SESSION_CAP = 5;

function model(
  m: Omit<EmulatedModel, 'seed' | 'loraSessionCap' | 'stopStrings'> & { loraSessionCap?: number; stopStrings?: boolean },
): EmulatedModel {
  return { loraSessionCap: DEFAULT_LORA_SESSION_CAP, ...m, stopStrings: m.stopStrings ?? true, seed: hashString(m.name) };
}

/** The Qwen3 vocabulary (151,643 ranks + 26 added tokens, padded to 151,936 ids); <|im_end|> and <|endoftext|> end generation. */
const QWEN3_TOKENIZER = { tokenizerFolder: 'qwen3', eosTokenIds: [151_645, 151_643] };

/** A Qwen3.5-family model (248,320-id vocabulary, 262,144-token context) on H100s. */
function qwen35(name: string, gpuCount: number, tokenPrices: TokenPrices, stopStrings = true): EmulatedModel {
  return model({
    stopStrings,
    name,
    vocabSize: 248_320,
    maxSeqLen: 32_768,
    maxLoraRank: 64,
    maxBatchSize: 512,
    gpuType: 'H100-80GB',
    gpuCount,
    pricePerGpuHour: 2.99,
    tokenPrices,
    contextLength: 262_144,
    tokenizer: name,
    tokenizerFolder: 'qwen3.5',
    eosTokenIds: [248_046, 248_044],
  });
}

export const EMULATED_MODELS: readonly EmulatedModel[] = [
  model({
    name: 'roundhouse/tiny-chat',
    vocabSize: 4096,
    maxSeqLen: 2048,
    maxLoraRank: 64,
    maxBatchSize: 256,
    gpuType: 'H100-80GB',
    gpuCount: 1,
    pricePerGpuHour: 2.5,
    tokenPrices: { prefill: 0.01, sample: 0.03, train: 0.03 },
    contextLength: 2048,
    tokenizer: 'roundhouse/tiny-chat',
    tokenizerFolder: 'tiny-chat',
    eosTokenIds: [0, 2],
  }),
  model({
    name: 'Qwen/Qwen3-8B',
    vocabSize: 151_936,
    maxSeqLen: 32_768,
    maxLoraRank: 64,
    maxBatchSize: 512,
    gpuType: 'H100-80GB',
    gpuCount: 8,
    pricePerGpuHour: 2.99,
    tokenPrices: QWEN3_8B_TOKEN_PRICES,
    contextLength: 40_960,
    tokenizer: 'Qwen/Qwen3-8B',
    ...QWEN3_TOKENIZER,
  }),
  // The models the providers' own guides train: Together's "write a training loop" and Baseten's "programmatic training".
  qwen35('Qwen/Qwen3.8-27B', 8, { prefill: 0.44, sample: 1.35, train: 1.35 }),
  qwen35('Qwen/Qwen3.5-2B', 1, { prefill: 0.03, sample: 0.1, train: 0.1 }, false), // a model without stop-string support: `stop` is refused (400)
  model({
    name: 'Qwen/Qwen3-4B-Instruct-2507',
    vocabSize: 151_936,
    maxSeqLen: 32_768,
    maxLoraRank: 64,
    maxBatchSize: 512,
    gpuType: 'H100-80GB',
    gpuCount: 4,
    pricePerGpuHour: 2.99,
    tokenPrices: { prefill: 0.07, sample: 0.2, train: 0.2 },
    contextLength: 32_768,
    tokenizer: 'Qwen/Qwen3-4B-Instruct-2507',
    ...QWEN3_TOKENIZER,
  }),
  model({
    name: 'meta-llama/Llama-3.1-8B-Instruct',
    vocabSize: 128_256,
    maxSeqLen: 32_768,
    maxLoraRank: 64,
    maxBatchSize: 512,
    gpuType: 'H100-80GB',
    gpuCount: 8,
    pricePerGpuHour: 2.99,
    tokenPrices: QWEN3_8B_TOKEN_PRICES, // the same size
    contextLength: 131_072,
    tokenizer: 'meta-llama/Llama-3.1-8B-Instruct',
  }),
  model({
    name: 'openai/gpt-oss-20b',
    vocabSize: 201_088,
    maxSeqLen: 32_768,
    maxLoraRank: 32,
    maxBatchSize: 256,
    gpuType: 'B200-SXM',
    gpuCount: 8,
    pricePerGpuHour: 5.5,
    tokenPrices: { prefill: 0.33, sample: 1, train: 1 },
    contextLength: 131_072,
    tokenizer: 'openai/gpt-oss-20b',
    // One of the "fewer for some models": our choice of model and figure, not a published one.
    loraSessionCap: 2,
  }),
];

export function findModel(name: string): EmulatedModel | undefined {
  return EMULATED_MODELS.find((m) => m.name === name);
}

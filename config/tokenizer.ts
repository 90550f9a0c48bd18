import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';

/**
 * Hugging Face `tokenizer.json` tokenizers, loaded from a local folder: an explicit path, the tokenizers that
 * ship with the emulator's own models, or the local Hugging Face cache. Never downloads.
 */

export interface ChatMessage {
  role: string;
  content: string;
}

function readJson(file: string): Record<string, unknown> {
  return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
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

  /** `location` is a folder holding tokenizer.json (+ tokenizer_config.json), or the tokenizer.json itself. */
  static load(location: string): TextTokenizer {
    const isFile = statSync(location).isFile();
    const dir = isFile ? path.dirname(location) : location;
    const file = isFile ? location : path.join(dir, 'tokenizer.json');
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
  renderChat(messages: ChatMessage[], addGenerationPrompt: boolean): string {
    const template = this.config.chat_template;
    if (typeof template !== 'string') throw new Error(`${this.source}: tokenizer_config.json has no chat_template`);
    this.chatTemplate ??= new Template(template);
    return this.chatTemplate.render({
      messages,
      add_generation_prompt: addGenerationPrompt,
      bos_token: tokenText(this.config.bos_token) ?? '',
      eos_token: tokenText(this.config.eos_token) ?? '',
    });
  }
}

/** Tokenizers that ship with the emulator's own models, by model name. */
export function bundledTokenizerDir(model: string): string | undefined {
  const dir = path.resolve(__dirname, '..', 'emulator', 'models', model.replace(/^roundhouse\//, ''));
  return model.startsWith('roundhouse/') && existsSync(path.join(dir, 'tokenizer.json')) ? dir : undefined;
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

/** Finds and loads the tokenizer for a model: explicit path → bundled → Hugging Face cache. */
export function tokenizerFor(model: string, tokenizerRepo: string | undefined, explicit?: string): TextTokenizer {
  const location = explicit ?? bundledTokenizerDir(model) ?? huggingFaceCacheDir(tokenizerRepo ?? model);
  if (!location) {
    throw new TokenizerNotFoundError(
      `no tokenizer for ${model}: set provider.tokenizer to a folder with tokenizer.json, or put ${tokenizerRepo ?? model} in the Hugging Face cache (HF_HOME)`,
    );
  }
  let tokenizer = cache.get(location);
  if (!tokenizer) {
    tokenizer = TextTokenizer.load(location);
    cache.set(location, tokenizer);
  }
  return tokenizer;
}

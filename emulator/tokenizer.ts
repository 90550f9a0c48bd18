import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';

/** Encodes stop strings and decodes completions with the tokenizer that ships with one of the emulator's own models. */
export interface BundledTokenizer {
  /** Special-token strings in the text become their control tokens; nothing else is added. */
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

const loaded = new Map<string, BundledTokenizer>();

/**
 * The tokenizer in `emulator/models/<name>/` for a `roundhouse/<name>` model; undefined for other models (the
 * emulator shares no code with the clients, so it reads the files itself).
 */
export function bundledTokenizer(model: string): BundledTokenizer | undefined {
  const dir = path.resolve(__dirname, 'models', model.replace(/^roundhouse\//, ''));
  if (!model.startsWith('roundhouse/') || !existsSync(path.join(dir, 'tokenizer.json'))) return undefined;
  let tokenizer = loaded.get(dir);
  if (!tokenizer) {
    tokenizer = load(dir);
    loaded.set(dir, tokenizer);
  }
  return tokenizer;
}

function load(dir: string): BundledTokenizer {
  const readJson = (name: string) => JSON.parse(readFileSync(path.join(dir, name), 'utf8')) as Record<string, unknown>;
  const config = existsSync(path.join(dir, 'tokenizer_config.json')) ? readJson('tokenizer_config.json') : {};
  const tokenizer = new Tokenizer(readJson('tokenizer.json'), config);
  return {
    encode: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) =>
      ids.length === 0 ? '' : tokenizer.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
  };
}

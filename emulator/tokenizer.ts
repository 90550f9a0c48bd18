import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Tokenizer } from '@huggingface/tokenizers';
import { findModel } from './models';

/** Encodes stop strings and decodes completions with the tokenizer that ships for one of the emulator's models. */
export interface BundledTokenizer {
  /** Special-token strings in the text become their control tokens; nothing else is added. */
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

const loaded = new Map<string, BundledTokenizer>();

/**
 * The tokenizer in `emulator/models/<folder>/` for a model that has one (its own models' and the Qwen models');
 * undefined for other models. The emulator shares no code with the clients, so it reads the files itself.
 */
export function bundledTokenizer(model: string): BundledTokenizer | undefined {
  const folder = findModel(model)?.tokenizerFolder;
  if (!folder) return undefined;
  const dir = path.resolve(__dirname, 'models', folder);
  let tokenizer = loaded.get(dir);
  if (!tokenizer) {
    tokenizer = load(dir);
    loaded.set(dir, tokenizer);
  }
  return tokenizer;
}

function load(dir: string): BundledTokenizer {
  const readJson = (name: string) => {
    const bytes = readFileSync(path.join(dir, name));
    return JSON.parse((name.endsWith('.gz') ? gunzipSync(bytes) : bytes).toString('utf8')) as Record<string, unknown>;
  };
  const config = existsSync(path.join(dir, 'tokenizer_config.json')) ? readJson('tokenizer_config.json') : {};
  const vocabulary = existsSync(path.join(dir, 'tokenizer.json')) ? 'tokenizer.json' : 'tokenizer.json.gz';
  const tokenizer = new Tokenizer(readJson(vocabulary), config);
  return {
    encode: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) =>
      ids.length === 0 ? '' : tokenizer.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
  };
}

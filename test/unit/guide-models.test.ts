import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCampaignSpec } from '../../config/spec';
import { TokenizerNotFoundError, bundledTokenizerDir, tokenizerFor } from '../../config/tokenizer';
import { findModel } from '../../emulator/models';
import { validateCampaignLocally } from '../../workers/validate';

/**
 * The providers' own guides train `Qwen/Qwen3.8-27B` (Together) and `Qwen/Qwen3.5-2B` (Baseten). The emulator
 * serves both; a spec naming them validates, and a round finds their tokenizer where Roundhouse looks for any
 * real model's: `provider.tokenizer`, else the Hugging Face cache (no tokenizer of theirs ships with Roundhouse).
 */

const GUIDE_MODELS = ['Qwen/Qwen3.8-27B', 'Qwen/Qwen3.5-2B'];
const savedHome = process.env.HF_HOME;
let cacheHome: string;

beforeAll(() => {
  cacheHome = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-hf-'));
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
  // A stand-in tokenizer.json (the emulator's own): the lookup is what is tested, not Qwen's merges.
  fs.copyFileSync(path.join(bundledTokenizerDir('roundhouse/tiny-chat')!, 'tokenizer.json'), path.join(snapshot, 'tokenizer.json'));
}

test.each(GUIDE_MODELS)('the emulator serves %s with the Qwen3.5 vocabulary, naming its tokenizer repository', (name) => {
  expect(findModel(name)).toMatchObject({ name, vocabSize: 248_320, tokenizer: name });
});

test.each(GUIDE_MODELS)('without a cached tokenizer, a round for %s fails before provisioning, saying where to put one', (name) => {
  process.env.HF_HOME = path.join(cacheHome, 'empty');
  expect(() => tokenizerFor(name, findModel(name)!.tokenizer)).toThrow(TokenizerNotFoundError);
  expect(() => tokenizerFor(name, findModel(name)!.tokenizer)).toThrow(/provider\.tokenizer.*Hugging Face cache \(HF_HOME\)/);
});

test.each(GUIDE_MODELS)('with its tokenizer in the Hugging Face cache, %s resolves, and a spec naming it validates', (name) => {
  process.env.HF_HOME = path.join(cacheHome, 'filled');
  cacheTokenizer(process.env.HF_HOME, findModel(name)!.tokenizer);
  const tokenizer = tokenizerFor(name, findModel(name)!.tokenizer);
  expect(tokenizer.source).toContain(`models--${name.replace('/', '--')}`);
  expect(tokenizer.encode('hello world').length).toBeGreaterThan(0);

  const example = path.resolve(__dirname, '../../examples/support-tickets/campaign.yaml');
  const spec = loadCampaignSpec(example);
  const checked = validateCampaignLocally({ ...spec, provider: { ...spec.provider, model: name } });
  expect(checked).toMatchObject({ tokenized: true, trainRows: expect.any(Number) });
});

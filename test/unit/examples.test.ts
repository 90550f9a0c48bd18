import fs from 'node:fs';
import path from 'node:path';
import { loadCampaignSpec } from '../../config/io/spec';
import { validateCampaignLocally } from '../../workers/validate';
import { nearDuplicateWarning } from '../../activities/data';
import { generateTickets } from '../../examples/support-tickets/generate';

const root = path.resolve(__dirname, '../../examples');
const specs = fs.readdirSync(root).flatMap((dir) =>
  fs
    .readdirSync(path.join(root, dir))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => path.join(dir, f)),
);

test('there are example specs of every round kind (a staged spec counts each of its stages)', () => {
  const kinds = specs.flatMap((s) => {
    const spec = loadCampaignSpec(path.join(root, s));
    return spec.stages ? spec.stages.map((stage) => stage.round.kind) : [spec.round.kind];
  });
  expect(new Set(kinds)).toEqual(new Set(['sft', 'grpo', 'dpo', 'custom']));
  expect(specs.filter((s) => loadCampaignSpec(path.join(root, s)).stages)).toEqual([
    'arithmetic/pipeline.yaml',
    'reasoning-gym/campaign.yaml',
    'reasoning-gym/math-verify.yaml',
    'support-tickets/pipeline.yaml',
  ]);
});

test.each(specs)('examples/%s parses and its data passes the checks made before provisioning', (spec) => {
  const parsed = loadCampaignSpec(path.join(root, spec));
  const checked = validateCampaignLocally(parsed);
  expect(checked.tokenized).toBe(true);
  expect(checked.trainRows).toBeGreaterThan(0);
  expect(checked.evalRows).toBeGreaterThan(0);
});

test.each(specs)('examples/%s draws no near-duplicate warning: its eval rows do not repeat training sentences', (spec) => {
  expect(validateCampaignLocally(loadCampaignSpec(path.join(root, spec))).warnings).toEqual([]);
});

describe('the support-ticket demo is held out by wording, not only by prompt', () => {
  const sentence = (prompt: string) => /Ticket: [^,:]*[,:] ([^.]*)\./.exec(prompt)![1]!;
  const read = (file: string) =>
    fs
      .readFileSync(path.join(root, 'support-tickets', file), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { prompt: string });

  test('no subject/problem sentence of the held-out set appears in training, and every one is worded from seen parts', () => {
    const train = new Set(read('train.jsonl').map((r) => sentence(r.prompt)));
    const held = read('eval.jsonl').map((r) => sentence(r.prompt));
    expect(held).toHaveLength(60);
    expect(held.filter((s) => train.has(s))).toEqual([]);
    // Each held-out subject and each held-out problem is seen in training, in other combinations.
    const words = new Set([...train].flatMap((s) => s.split(' ')));
    for (const s of held) for (const w of s.split(' ')) expect(words.has(w)).toBe(true);
    const pairs = read('pairs.eval.jsonl').map((r) => sentence(r.prompt));
    const pairsTrain = new Set(read('pairs.train.jsonl').map((r) => sentence(r.prompt)));
    expect(pairs.filter((s) => pairsTrain.has(s))).toEqual([]);
  });

  test('the data check warns when eval rows repeat a training sentence with only the greeting changed (the old split)', () => {
    const rows = (xs: { prompt: string }[], file: string) => ({ path: file, rows: xs.map((r, i) => ({ line: i + 1, prompt: r.prompt })) });
    const evalSet = generateTickets(60, 7, new Set(), 'all');
    const train = generateTickets(300, 1, new Set(evalSet.map((r) => r.prompt)), 'all');
    const warning = nearDuplicateWarning(rows(train, 'train.jsonl'), rows(evalSet, 'eval.jsonl'));
    expect(warning).toMatch(/^eval\.jsonl: (\d+) of 60 eval rows repeat a sentence of a training row/);
    const count = Number(/: (\d+) of 60/.exec(warning!)![1]);
    expect(count).toBeGreaterThan(30);
    process.stderr.write(`[demo data] before the split: ${count} of 60 held-out tickets repeated a training sentence\n`);
    const heldOut = generateTickets(60, 7, new Set(), 'held-out');
    expect(
      nearDuplicateWarning(rows(generateTickets(300, 1, new Set(), 'train'), 'train.jsonl'), rows(heldOut, 'eval.jsonl')),
    ).toBeUndefined();
  });
});

import fs from 'node:fs';
import path from 'node:path';
import { loadCampaignSpec } from '../../config/spec';
import { validateCampaignLocally } from '../../workers/validate';

const root = path.resolve(__dirname, '../../examples');
const specs = fs.readdirSync(root).flatMap((dir) =>
  fs
    .readdirSync(path.join(root, dir))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => path.join(dir, f)),
);

test('there are example specs of every round kind', () => {
  expect(new Set(specs.map((s) => loadCampaignSpec(path.join(root, s)).round.kind))).toEqual(new Set(['sft', 'grpo', 'dpo']));
});

test.each(specs)('examples/%s parses and its data passes the checks made before provisioning', (spec) => {
  const parsed = loadCampaignSpec(path.join(root, spec));
  const checked = validateCampaignLocally(parsed);
  expect(checked.tokenized).toBe(true);
  expect(checked.trainRows).toBeGreaterThan(0);
  expect(checked.evalRows).toBeGreaterThan(0);
});

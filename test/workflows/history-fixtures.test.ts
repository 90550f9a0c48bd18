import fs from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows } from '../helpers/temporal';

/**
 * Histories recorded by earlier versions of the workflow code (test/fixtures/histories/*.json) must replay against
 * the current code: campaigns run for days across deploys, and a workflow task that replays differently fails them.
 * `npm run record-histories` records a fresh set with the current code (test/workflows/history-fixtures.record.ts):
 * do it before a change that touches workflows, and commit them beside the older ones.
 */
const fixturesDir = path.resolve(__dirname, '../fixtures/histories');
let bundle: WorkflowBundleWithSourceMap;
beforeAll(async () => {
  bundle = await bundleWorkflows();
});

const fixtures = () =>
  fs.existsSync(fixturesDir)
    ? fs
        .readdirSync(fixturesDir)
        .filter((f) => f.endsWith('.json'))
        .sort()
    : [];

test('every recorded history replays against the current workflow code', async () => {
  const files = fixtures();
  expect(files.length).toBeGreaterThanOrEqual(8);
  for (const file of files) {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(fixturesDir, file), 'utf8')));
    await expect(Worker.runReplayHistory({ workflowBundle: bundle }, history, file)).resolves.toBeUndefined();
  }
});

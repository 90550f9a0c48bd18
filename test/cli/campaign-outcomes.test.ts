import fs from 'node:fs';
import path from 'node:path';
import { campaignProgressQuery, type CampaignInput } from '../../workflows/campaign/contract';
import { campaignWorkflow } from '../../workflows';
import type { RunningEmulator } from '../helpers/emulator';
import { runCli, startCliStack, type CliRun, type CliStack } from '../helpers/cli-stack';
import { readArtifact } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import type { TestTemporal } from '../helpers/temporal';

// What a user runs: bin/roundhouse.js, whose wrapper sets the process's exit code from main()'s.
const bin = path.resolve(__dirname, '../../bin/roundhouse.js');

let stack: CliStack;
let temporal: TestTemporal;
let emulator: RunningEmulator;
let taskQueue: string;
let env: Record<string, string>;

beforeAll(async () => {
  stack = await startCliStack('cli-outcomes');
  ({ temporal, emulator, taskQueue, env } = stack);
});

afterAll(() => stack?.close());

type Run = CliRun;

function roundhouse(...args: string[]): Promise<Run> {
  return runCli(bin, args, env, 180_000);
}

/** A campaign spec file against this test's emulator; `yaml` replaces the `rounds:` line. */
function specFile(options: { trainRows?: number; yaml?: string; model?: string }): string {
  const { dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: options.trainRows ?? 20,
    evalRows: 5,
    yaml: options.yaml ?? 'rounds: { max: 1 }',
  });
  const file = path.join(dir, 'campaign.yaml');
  if (options.model)
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('model: roundhouse/tiny-chat', `model: ${options.model}`));
  return file;
}

/** Exit code 1 and one line on stderr naming the campaign and why, no stack trace. */
function expectFailedWith(run: Run, line: string): void {
  expect(run.code).toBe(1);
  expect(run.stderr).toContain(`roundhouse: ${line}`);
  expect(run.stderr).not.toMatch(/\n\s+at /);
}

async function untilTraining(id: string): Promise<void> {
  const handle = temporal.client.workflow.getHandle(id);
  for (let i = 0; i < 600; i++) {
    const p = await handle.query(campaignProgressQuery).catch(() => undefined);
    if (p?.currentRound?.phase === 'training') return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`campaign ${id} never reached training`);
}

describe('an ended campaign that did not succeed exits 1 and says why', () => {
  test('a failed round: run --wait, watch, status and status --json exit 1 and print the message its round report records', async () => {
    const id = `outcome-failed-${Date.now()}`;
    const run = await roundhouse('run', specFile({ model: 'nosuch/model' }), '--id', id, '--wait');
    const why = "provider.model: 'nosuch/model' is not supported by ";
    expectFailedWith(run, `campaign ${id} failed: round 1 failed (InvalidInput): ${why}`);
    expect(run.stdout).toMatch(new RegExp(`campaign ${id}: failed \\(round 1 failed \\(InvalidInput\\)\\)`));
    expect(run.stdout).toContain(`round 1 failed (InvalidInput): ${why}`);

    // The reason printed is the one the round's report holds.
    const json = await roundhouse('status', id, '--json');
    expect(json.code).toBe(1);
    const progress = JSON.parse(json.stdout);
    const report = await readArtifact<{ error_type: string; error_message: string }>(progress.rounds[0].reportPath);
    expect(report).toMatchObject({ error_type: 'InvalidInput', error_message: expect.stringContaining(why) });
    expect(progress.rounds[0]).toMatchObject({ status: 'failed', errorType: 'InvalidInput', errorMessage: report.error_message });
    expect(run.stdout).toContain(`round 1 failed (InvalidInput): ${report.error_message}\n`);

    for (const command of ['status', 'watch']) {
      const again = await roundhouse(command, id);
      expectFailedWith(again, `campaign ${id} failed: round 1 failed (InvalidInput): ${report.error_message}`);
      expect(again.stdout).toContain(`round 1 failed (InvalidInput): ${report.error_message}\n`);
    }
  });

  test('a cancelled campaign: run --wait, watch and status exit 1 and say who cancelled it', async () => {
    const id = `outcome-cancelled-${Date.now()}`;
    const waiting = roundhouse('run', specFile({ trainRows: 300, yaml: 'rounds: { max: 3 }' }), '--id', id, '--wait');
    await untilTraining(id);
    await temporal.client.workflow.getHandle(id).cancel();
    const line = `campaign ${id} cancelled: requested by ${temporal.client.options.identity}`;
    expectFailedWith(await waiting, line);
    expectFailedWith(await roundhouse('watch', id), line);
    expectFailedWith(await roundhouse('status', id), line);
  });

  test('a terminated campaign: run --wait, watch and status exit 1 and print the reason it was terminated with', async () => {
    const id = `outcome-terminated-${Date.now()}`;
    const waiting = roundhouse('run', specFile({ trainRows: 300, yaml: 'rounds: { max: 3 }' }), '--id', id, '--wait');
    await untilTraining(id);
    await temporal.client.workflow.getHandle(id).terminate('the operator found bad rows in the training data');
    const line = `campaign ${id} terminated: the operator found bad rows in the training data`;
    expectFailedWith(await waiting, line);
    expectFailedWith(await roundhouse('watch', id), line);
    expectFailedWith(await roundhouse('status', id), line);
  });

  test('a timed-out campaign: watch and status exit 1 and name the timeout it ran past', async () => {
    const id = `outcome-timed-out-${Date.now()}`;
    const { spec, dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 300, evalRows: 5, yaml: 'rounds: { max: 3 }' });
    const input: CampaignInput = { campaignId: id, spec, reportRoot: path.join(dir, 'campaigns') };
    // A workflow timeout is set when a campaign is started (run does not set one; a schedule or another client may).
    await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: id, args: [input], workflowExecutionTimeout: '3s' });
    const watch = await roundhouse('watch', id);
    const line = `campaign ${id} timed out: it ran past its workflow execution timeout 3s`;
    expectFailedWith(watch, line);
    expectFailedWith(await roundhouse('status', id), line);
  });
});

describe('a campaign that ended at a limit or its target exits 0', () => {
  test('stopped by its GPU-minute budget: run --wait, watch and status exit 0', async () => {
    const id = `outcome-budget-${Date.now()}`;
    const run = await roundhouse(
      'run',
      specFile({ trainRows: 300, yaml: 'rounds: { max: 3 }\nbudget: { maxGpuMinutes: 0.0001 }' }),
      '--id',
      id,
      '--wait',
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`campaign ${id}: stopped \\(GPU-minute budget reached in round 1\\)`));
    for (const command of ['status', 'watch']) {
      const again = await roundhouse(command, id);
      expect(again.code).toBe(0);
      expect(again.stdout).toMatch(new RegExp(`campaign ${id}: stopped`));
    }
  });

  test('stopped by `stop --now`: watch and status exit 0', async () => {
    const id = `outcome-stop-${Date.now()}`;
    expect((await roundhouse('run', specFile({ trainRows: 300, yaml: 'rounds: { max: 3 }' }), '--id', id)).code).toBe(0);
    await untilTraining(id);
    expect((await roundhouse('stop', id, '--now')).code).toBe(0);
    const watch = await roundhouse('watch', id);
    expect(watch.stderr).toBe('');
    expect(watch.code).toBe(0);
    expect(watch.stdout).toMatch(new RegExp(`campaign ${id}: stopped \\(stopped by request\\)`));
    expect((await roundhouse('status', id)).code).toBe(0);
  });

  test('its target reached before rounds.max: run --wait and status exit 0', async () => {
    const id = `outcome-target-${Date.now()}`;
    const run = await roundhouse(
      'run',
      specFile({ yaml: 'rounds: { max: 3, target: { metric: accuracy, atLeast: 0 } }' }),
      '--id',
      id,
      '--wait',
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`campaign ${id}: completed \\(target reached: accuracy [\\d.]+ ≥ 0\\)`));
    expect((await roundhouse('status', id)).code).toBe(0);
  });
});

test.each([
  ['run', '--help'],
  ['watch', '--help'],
  ['status', '--help'],
])('%s %s states these exit codes', async (...args) => {
  const help = await roundhouse(...args);
  expect(help.code).toBe(0);
  expect(help.stdout.replace(/\s+/g, ' ')).toContain(
    'exit 0 if it completed (rounds.max or its target reached) or was stopped (stop, a budget), 1 if it failed, was cancelled, terminated or timed out',
  );
});

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { ledger, testApiKey, togetherProvider, type RunningEmulator } from '../helpers/emulator';
import { runCli, startCliStack, type CliRun, type CliStack } from '../helpers/cli-stack';
import { ticketCampaignSpec } from '../helpers/campaign';
import { distCli } from '../helpers/dist';
import { uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { ensurePythonEnv, startPythonWorker, TEST_FUNCTIONS } from '../helpers/python-worker';

// The compiled CLI, as an installed package runs it (exit-codes.test.ts covers bin/roundhouse.js's tsx path).
const bin = distCli;

let stack: CliStack;
let temporal: TestTemporal;
let emulator: RunningEmulator;
let env: Record<string, string>;
let specFile: string;

beforeAll(async () => {
  stack = await startCliStack('cli');
  ({ temporal, emulator, env } = stack);
  const { dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 20, evalRows: 5, yaml: 'rounds: { max: 1 }' });
  specFile = path.join(dir, 'campaign.yaml');
});

afterAll(() => stack?.close());

function roundhouse(...args: string[]): Promise<CliRun> {
  return runCli(bin, args, env);
}

function expectUsageError(run: { code: number | null; stderr: string }, message: RegExp): void {
  expect(run.code).toBe(2);
  expect(run.stderr).toMatch(message);
  expect(run.stderr).not.toMatch(/\n\s+at /);
}

describe('every subcommand has --help with an example', () => {
  test.each(['up', 'worker', 'emulator', 'run', 'status', 'watch', 'pause', 'resume', 'stop', 'report', 'checkpoints', 'reap', 'demo'])(
    '%s --help',
    async (command) => {
      const run = await roundhouse(command, '--help');
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/Usage: roundhouse/);
      expect(run.stdout).toMatch(/Example/);
    },
  );

  test('schedule subcommands', async () => {
    for (const sub of ['create', 'list', 'pause', 'delete']) {
      const run = await roundhouse('schedule', sub, '--help');
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/Example/);
    }
  });
});

describe('bad input: documented exit codes and messages', () => {
  test('run: a missing spec file', async () => {
    expectUsageError(await roundhouse('run', '/nope/campaign.yaml'), /campaign\.yaml: no such file/);
  });

  test('run: an invalid spec names file, line and field', async () => {
    const bad = path.join(path.dirname(specFile), 'bad.yaml');
    fs.writeFileSync(bad, fs.readFileSync(specFile, 'utf8').replace('epochs: 2', 'epochs: 0'));
    expectUsageError(await roundhouse('run', bad), new RegExp(`bad\\.yaml:\\d+ training\\.epochs: `));
  });

  test('run: bad data names the data file line and field, and nothing is provisioned', async () => {
    const dir = path.dirname(specFile);
    const before = (await ledger(emulator)).resources.length;
    fs.copyFileSync(path.join(dir, 'train.jsonl'), path.join(dir, 'train-bad.jsonl'));
    fs.appendFileSync(path.join(dir, 'train-bad.jsonl'), '{"prompt": "x", "answer": ""}\n');
    const bad = path.join(dir, 'bad-data.yaml');
    fs.writeFileSync(bad, fs.readFileSync(specFile, 'utf8').replace('train: train.jsonl', 'train: train-bad.jsonl'));
    expectUsageError(await roundhouse('run', bad), /train-bad\.jsonl:21 answer: must not be empty/);
    expect((await ledger(emulator)).resources.length).toBe(before);
  });

  test.each([
    ['a grpo round without rewards', 'round: { kind: grpo }', /round\.grpo: is required when round\.kind is grpo/],
    [
      'a KL penalty without reference logprobs',
      'round: { kind: grpo, grpo: { reward: { kind: exact }, loss: { beta: 0.1 } } }',
      /round\.grpo\.loss\.beta: is above 0 but no reference logprobs/,
    ],
  ])('run: %s is refused with file, line and field before anything starts', async (_what, round, message) => {
    const dir = path.dirname(specFile);
    const bad = path.join(dir, 'bad-kind.yaml');
    fs.writeFileSync(bad, `${fs.readFileSync(specFile, 'utf8').replace(/temperature: 0/, 'temperature: 1')}\n${round}\n`);
    const run = await roundhouse('run', bad);
    expectUsageError(run, message);
    expect(run.stderr).toMatch(/bad-kind\.yaml:\d+ round\./);
  });

  test('run: dpo rows missing rejected name the data file line and field', async () => {
    const dir = path.dirname(specFile);
    fs.writeFileSync(
      path.join(dir, 'pairs-bad.jsonl'),
      '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "d", "chosen": "e"}\n',
    );
    const bad = path.join(dir, 'bad-dpo.yaml');
    fs.writeFileSync(
      bad,
      `${fs.readFileSync(specFile, 'utf8').replace('train: train.jsonl', 'train: pairs-bad.jsonl').replace('eval: eval.jsonl', 'eval: pairs-bad.jsonl')}\nround: { kind: dpo }\n`,
    );
    expectUsageError(await roundhouse('run', bad), /pairs-bad\.jsonl:2 rejected: is required/);
  });

  describe('a staged spec whose stage 2 is bad is refused before anything starts', () => {
    /** A two-stage spec beside the ticket data; stage 2 (`second`) sets the given blocks. */
    const twoStages = (name: string, stage2: string) => {
      const file = path.join(path.dirname(specFile), `${name}.yaml`);
      const text = `${fs.readFileSync(specFile, 'utf8')}stages:\n  - name: first\n  - name: second\n${stage2}`;
      fs.writeFileSync(file, text);
      return { file, text };
    };
    /** `run` exits 2 with `message`, no campaign workflow started, and the emulator provisioned nothing. */
    const expectRefusedBeforeStart = async (file: string, message: RegExp) => {
      const resourcesBefore = (await ledger(emulator)).resources.length;
      const id = `cli-stages-refused-${Date.now()}`;
      expectUsageError(await roundhouse('run', file, '--id', id), message);
      await expect(temporal.client.workflow.getHandle(id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
      expect((await ledger(emulator)).resources.length).toBe(resourcesBefore);
    };

    test("a bad field in stage 2: the stage's field and its line", async () => {
      const { file, text } = twoStages(
        'stages-bad-field',
        '    training: { epochs: 0, batchSize: 10, learningRate: 0.005, loraRank: 8, maxSeqLen: 256 }\n',
      );
      const line = text.split('\n').findIndex((l) => l.includes('epochs: 0')) + 1;
      await expectRefusedBeforeStart(file, new RegExp(`stages-bad-field\\.yaml:${line} stages\\.1\\.training\\.epochs: `));
    });

    test("a malformed line in stage 2's eval file: the stage, the file and the line", async () => {
      const dir = path.dirname(specFile);
      fs.copyFileSync(path.join(dir, 'eval.jsonl'), path.join(dir, 'eval-malformed.jsonl')); // 5 rows
      fs.appendFileSync(path.join(dir, 'eval-malformed.jsonl'), '{"prompt": "x", "answer": \n');
      const { file } = twoStages('stages-malformed-eval', '    data: { train: train.jsonl, eval: eval-malformed.jsonl }\n');
      await expectRefusedBeforeStart(file, /roundhouse: stage 2 \(second\): \S*eval-malformed\.jsonl:6: not valid JSON/);
    });

    test("stage 2's eval file missing: the stage and the file", async () => {
      const { file } = twoStages('stages-missing-eval', '    data: { train: train.jsonl, eval: eval-missing.jsonl }\n');
      await expectRefusedBeforeStart(file, /roundhouse: stage 2 \(second\): \S*eval-missing\.jsonl: no such file/);
    });

    test("stage 2's Python scorer not registered on its worker, or a worker variable notify names missing: asked of the workers, refused", async () => {
      const pythonQueue = uniqueTaskQueue('cli-stages-py');
      const python = await startPythonWorker({ address: temporal.settings.address!, taskQueue: pythonQueue });
      try {
        const { file } = twoStages(
          'stages-missing-scorer',
          `    evaluation: { scorer: { kind: python, name: no_such_scorer, taskQueue: ${pythonQueue} } }\n`,
        );
        await expectRefusedBeforeStart(
          file,
          /roundhouse: stage 2 \(second\): evaluation\.scorer\.name: no scorer named 'no_such_scorer' is registered/,
        );
      } finally {
        await python.stop();
      }
      const variable = `RH_CLI_NO_HOOK_${process.pid}`;
      const { file } = twoStages('stages-missing-hook', '');
      fs.appendFileSync(file, `notify: { webhookEnv: ${variable} }\n`);
      const resourcesBefore = (await ledger(emulator)).resources.length;
      const id = `cli-no-hook-${Date.now()}`;
      const run = await roundhouse('run', file, '--id', id);
      expect(run.code).toBe(1);
      await expect(temporal.client.workflow.getHandle(id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
      expect(run.stderr).toMatch(
        new RegExp(`roundhouse: notify\\.webhookEnv: ${variable} is not set on the worker .*\\(WorkerEnvironmentMissing\\)`),
      );
      expect((await ledger(emulator)).resources.length).toBe(resourcesBefore);
    });
  });

  test.each([['status'], ['watch'], ['pause'], ['resume'], ['stop'], ['report'], ['checkpoints']])(
    '%s: an unknown campaign id',
    async (command) => {
      expectUsageError(await roundhouse(command, 'no-such-campaign'), /no-such-campaign: no campaign/);
    },
  );

  test('schedule pause/delete: an unknown schedule id', async () => {
    expectUsageError(await roundhouse('schedule', 'pause', 'no-such-schedule'), /no-such-schedule: no schedule/);
    expectUsageError(await roundhouse('schedule', 'delete', 'no-such-schedule'), /no-such-schedule: no schedule/);
  });

  test('a server that cannot be reached is exit code 1 with what to do', async () => {
    const run = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [bin, 'status', 'x'], { env: { ...process.env, ...env, TEMPORAL_ADDRESS: '127.0.0.1:1' } });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stderr }));
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/cannot reach Temporal at 127\.0\.0\.1:1.*roundhouse up/);
  });
});

describe('happy paths against a running stack', () => {
  test('run --wait, status, status --json, report, checkpoints, watch of a finished campaign', async () => {
    const id = `cli-${Date.now()}`;
    const run = await roundhouse('run', specFile, '--id', id, '--wait');
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`campaign ${id} started \\(20 training rows, 5 held out\\)`));
    expect(run.stdout).toMatch(/completed \(rounds\.max \(1\) reached\)/);

    const status = await roundhouse('status', id);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/round {2}status {5}accuracy/);
    const json = JSON.parse((await roundhouse('status', id, '--json')).stdout);
    expect(json).toMatchObject({ campaignId: id, status: 'completed', rounds: [{ round: 1, status: 'completed' }] });

    const report = await roundhouse('report', id);
    expect(report.code).toBe(0);
    const [html, md] = report.stdout.trim().split('\n');
    expect(fs.existsSync(html!)).toBe(true);
    expect(fs.readFileSync(md!, 'utf8')).toMatch(/\| 1 \| completed/);

    // Checkpoints as records: the round's final training and sampler checkpoints, its best named everywhere.
    const roundReport = JSON.parse(fs.readFileSync(json.rounds[0].reportPath, 'utf8'));
    const listed = JSON.parse((await roundhouse('checkpoints', id, '--json')).stdout);
    expect(listed.checkpoints.filter((c: { final: boolean }) => c.final)).toEqual([
      {
        round: 1,
        kind: 'training',
        checkpoint_id: roundReport.training_checkpoint_id,
        step: 4,
        final: true,
        metric: roundReport.accuracy,
        eval_loss: roundReport.trained_loss,
      },
      {
        round: 1,
        kind: 'sampler',
        checkpoint_id: roundReport.sampler_checkpoint_id,
        step: 4,
        final: true,
        metric: roundReport.accuracy,
        eval_loss: roundReport.trained_loss,
      },
    ]);
    expect(roundReport.checkpoints).toEqual(listed.checkpoints);
    expect(listed.best).toMatchObject({ round: 1, kind: 'training', checkpoint_id: roundReport.training_checkpoint_id });
    const table = await roundhouse('checkpoints', id);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain(`${roundReport.training_checkpoint_id}  ← best`);
    expect(fs.readFileSync(md!, 'utf8')).toContain(`best checkpoint: round 1, \`${roundReport.training_checkpoint_id}\``);

    const watch = await roundhouse('watch', id);
    expect(watch.code).toBe(0);
    expect(watch.stdout).toMatch(new RegExp(`campaign ${id}: completed`));
  });

  test('pause, resume and stop a running campaign', async () => {
    const { dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 300, evalRows: 5, yaml: 'rounds: { max: 3 }' });
    const id = `cli-control-${Date.now()}`;
    expect((await roundhouse('run', path.join(dir, 'campaign.yaml'), '--id', id)).code).toBe(0);
    const paused = await roundhouse('pause', id);
    expect(paused.code).toBe(0);
    expect(paused.stdout).toMatch(/paused/);
    const resumed = await roundhouse('resume', id);
    expect(resumed.stdout).toMatch(/running/);
    // Nothing waits for approval here: refused by the update's validator, said plainly; a reject needs --reason.
    const approve = await roundhouse('approve', id, '--by', 'ana');
    expect(approve.code).toBe(1);
    expect(approve.stderr).toContain('roundhouse: approve: no promotion is waiting for approval in this campaign');
    expectUsageError(await roundhouse('reject', id), /required option '--reason <why>' not specified/);
    const stopped = await roundhouse('stop', id, '--now');
    expect(stopped.code).toBe(0);
    const handle = temporal.client.workflow.getHandle(id);
    const result = await handle.result();
    expect(result.status).toBe('stopped');
    for (let i = 0; i < 100 && (await ledger(emulator)).active.length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    expect((await ledger(emulator)).active).toEqual([]);
  });

  test('schedule create, list, pause, delete', async () => {
    const id = `cli-schedule-${Date.now()}`;
    const created = await roundhouse('schedule', 'create', specFile, '--id', id, '--every', '1 hour');
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/every 1 hour \(overlap skip\)/);
    expect((await roundhouse('schedule', 'list')).stdout).toMatch(new RegExp(`${id} {2}active`));
    expect((await roundhouse('schedule', 'pause', id)).code).toBe(0);
    expect((await roundhouse('schedule', 'list')).stdout).toMatch(new RegExp(`${id} {2}paused`));
    expect((await roundhouse('schedule', 'delete', id)).code).toBe(0);
    expectUsageError(await roundhouse('schedule', 'create', specFile, '--id', id), /--every: give --every/);
  });

  test('reap is a dry run by default; an untagged Together resource is only reported unless --reap-untagged takes it', async () => {
    const run = await roundhouse('reap', '--untagged-grace', '0');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(
      /active resources checked on \d+ endpoint\(s\), \d+ could not be checked, \d+ would be deactivated \(dry run; --apply to act\)/,
    );
    // A Together resource no round records and no session tags (its round was killed before it heard the id).
    const apiKey = testApiKey();
    const together = togetherProvider(emulator, apiKey);
    const untagged = await together.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'carried only by sessions on Together' });
    await together.close();
    const saved = { ...env };
    env.TOGETHER_API_KEY = apiKey;
    try {
      const reported = await roundhouse('reap', '--provider', 'together', '--base-url', emulator.url, '--apply');
      expect(reported.stdout).toMatch(new RegExp(`kept  together@\\S+  ${untagged.id}  .*reported only: reapUntagged is off`));
      expect((await ledger(emulator)).active).toContain(untagged.id);
      const taken = await roundhouse(
        'reap',
        '--provider',
        'together',
        '--base-url',
        emulator.url,
        '--reap-untagged',
        '--untagged-grace',
        '0',
        '--apply',
      );
      expect(taken.stdout).toMatch(new RegExp(`deactivated  together@\\S+  ${untagged.id}  .*untagged, no round records it`));
      expect((await ledger(emulator)).active).not.toContain(untagged.id);
    } finally {
      env = saved;
    }
  });
});

/** `roundhouse demo` with these arguments, its state in a fresh folder (returned), to its end (killed after 3 minutes). */
async function runDemo(args: string[], extraEnv: Record<string, string> = {}) {
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-demo-'));
  const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [bin, 'demo', ...args], {
      env: {
        ...process.env,
        ...env,
        ROUNDHOUSE_TASK_QUEUE: uniqueTaskQueue('demo'),
        ROUNDHOUSE_STATE_DIR: state,
        ROUNDHOUSE_LOG_LEVEL: 'info',
        ...extraEnv,
      },
      timeout: 180_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  return { ...run, state };
}

test('the demo (npm start) runs a campaign end to end on a smaller config, shows accuracy by round and writes the report, in plain lines when stdout is a pipe', async () => {
  const { dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 40,
    evalRows: 10,
    yaml: 'rounds: { max: 2, nextData: { policy: all } }',
  });
  const run = await runDemo(['--spec', path.join(dir, 'campaign.yaml')]);
  const demoState = run.state;
  expect(run.code).toBe(0);
  const accuracies = /Held-out accuracy by round: (\d+)% → (\d+)%/.exec(run.stdout);
  expect(accuracies).not.toBeNull();
  const report = /Report: (.*report\.html)/.exec(run.stdout)![1]!;
  expect(report.startsWith(demoState)).toBe(true);
  expect(fs.existsSync(report)).toBe(true);
  // What a person reads in a CI log or `npm start | tee`: log lines as text, no JSON, no webpack build report.
  const output = `${run.stdout}${run.stderr}`;
  expect(output).toMatch(/^\[[\d:]+\] INFO: Temporal server ready address=\S+/m);
  expect(output.split('\n').filter((line) => line.trimStart().startsWith('{'))).toEqual([]);
  expect(output).not.toMatch(/webpack|workflow-bundle|Workflow bundle created|modules by path/);
});

test('demo --python starts a Python worker per task queue the spec names and stops it after; the spec runs on it', async () => {
  const pythonQueue = uniqueTaskQueue('demo-py');
  const { dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 24,
    evalRows: 6,
    evaluation: `{ scorer: { kind: python, name: has_answer_digit, taskQueue: ${pythonQueue} } }`,
    yaml: 'rounds: { max: 1 }',
  });
  const run = await runDemo(['--spec', path.join(dir, 'campaign.yaml'), '--python', TEST_FUNCTIONS], {
    ROUNDHOUSE_PYTHON_WORKER: ensurePythonEnv(),
  });
  const output = `${run.stdout}${run.stderr}`;
  expect(run.code).toBe(0);
  const pids = /Python workers ready .*pids=\[?(\d+)/.exec(output);
  expect(pids).not.toBeNull();
  expect(() => process.kill(Number(pids![1]), 0)).toThrow(); // stopped with the command
  const report = /Report: (.*)report\.html/.exec(run.stdout)![1]!;
  const campaignDir = report.replace(/\/$/, '');
  const evaluations = JSON.parse(fs.readFileSync(path.join(campaignDir, 'round-1.evaluations.json'), 'utf8')) as { score?: number }[];
  expect(evaluations.length).toBe(6);
  expect(evaluations.every((e) => e.score === 0 || e.score === 1)).toBe(true); // scored in Python
});

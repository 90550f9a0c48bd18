import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { loadWorkerSettings } from '../../../config/io/worker-env';
import { connectClient, temporalClient } from '../../../workers/temporal-server';
import { ensureDist } from '../../../test/helpers/dist';
import { startWorkerProcess } from '../../../test/helpers/worker-process';
import { CASES, type CaseContext } from './cases';
import { startSkyrl } from './skyrl-server';
import { startEmulatorTarget, type Target } from './target';
import { startQuietTemporal } from './temporal-dev';
import { Teardown } from './teardown';

/**
 * `npm run conformance:skyrl [-- --against emulator|emulator-tinker] [--only sft,dpo] [--keep]`: Roundhouse (its workflows on a
 * Temporal dev server, real `roundhouse worker` processes) runs an SFT, a GRPO and a DPO round, a two-round campaign
 * continuing from its checkpoint, and a round whose worker is SIGKILLed inside training, against SkyRL 0.4.0's
 * Tinker-API server on loopback (installed into .roundhouse/venvs/skyrl on first use) or, with `--against emulator`,
 * the repo's emulator playing that server (its `skyrl` Tinker flavour; `emulator-tinker`: playing hosted Tinker). Prints `PASS <case> <seconds> s <figures>` or `FAIL <case>: <reason>` per case, then
 * `N passed, N failed`; exits 1 on any failure. Stops every process it started.
 */

interface Options {
  against: 'skyrl' | 'emulator' | 'emulator-tinker';
  only?: string[];
  keep: boolean;
}

function parseOptions(argv: string[]): Options {
  const value = (name: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const against = value('against') ?? 'skyrl';
  if (against !== 'skyrl' && against !== 'emulator' && against !== 'emulator-tinker')
    throw new Error(
      `--against ${against}: expected skyrl, emulator (SkyRL's server, emulated) or emulator-tinker (hosted Tinker, emulated)`,
    );
  const only = value('only')?.split(',');
  const unknown = only?.filter((name) => !CASES.some((c) => c.name === name));
  if (unknown?.length) throw new Error(`--only: no case ${unknown.join(', ')} (cases: ${CASES.map((c) => c.name).join(', ')})`);
  return { against, only, keep: argv.includes('--keep') };
}

/** Whether the work files outlive the run (`--keep`, or a failure: its evidence). */
let keepFiles = false;
const log = (line: string) => process.stderr.write(`[conformance] ${line}\n`);
const seconds = (since: number) => ((Date.now() - since) / 1000).toFixed(1);
/** An error's message with its causes' (a failed workflow's says only "Workflow execution failed"), on one line. */
function reasonOf(err: unknown): string {
  const messages: string[] = [];
  for (let e = err as Error | undefined; e; e = e.cause as Error | undefined) if (e.message) messages.push(e.message);
  return (messages.join(': ') || String(err)).replace(/\s+/g, ' ').trim().slice(0, 800);
}

/** The server under test, a dev server, the compiled CLI and one worker on a task queue of the run's own. */
async function setUp(options: Options, dir: string, teardown: Teardown): Promise<CaseContext> {
  const phases: string[] = [];
  let t = Date.now();
  const built = ensureDist(); // the worker processes (and a killed one's replacement) run the compiled CLI
  phases.push(`build ${seconds(t)} s (${built.built ? 'built' : 'current'})`);

  const target: Target =
    options.against === 'skyrl'
      ? await startSkyrl(log, teardown)
      : await startEmulatorTarget(teardown, options.against === 'emulator' ? 'skyrl' : 'tinker');
  phases.push(...target.setup);

  t = Date.now();
  const settings = loadWorkerSettings();
  const temporal = await startQuietTemporal(settings);
  teardown.add(() => temporal.stop());
  const connection = await connectClient(settings, temporal.address);
  teardown.add(() => connection.close());
  const client: Client = temporalClient({ ...settings, address: temporal.address }, connection);
  phases.push(`temporal ${seconds(t)} s`);

  t = Date.now();
  const taskQueue = `conformance-${randomUUID().slice(0, 8)}`;
  const workerEnv = {
    TEMPORAL_ADDRESS: temporal.address,
    TEMPORAL_NAMESPACE: temporal.namespace,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_STATE_DIR: path.join(dir, 'worker-state'),
    ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: '500', // a killed worker's round moves to its replacement at once
    TINKER_API_KEY: target.apiKey,
  };
  const ctx: CaseContext = { target, client, taskQueue, worker: startWorkerProcess(workerEnv), workerEnv, dir, log };
  teardown.add(async () => {
    fs.writeFileSync(path.join(dir, 'worker.log'), ctx.worker.output());
    await ctx.worker.stop();
  });
  await ctx.worker.ready;
  phases.push(`worker ${seconds(t)} s`);
  log(
    `against ${target.name} at ${target.provider.baseUrl} (model ${target.provider.model}); work files in ${dir}${target.files ? ` and ${target.files}` : ''}`,
  );
  process.stdout.write(`SETUP ${target.name}: ${phases.join(', ')}\n`);
  return ctx;
}

/** A failed case's workflows would keep the worker and the server busy for the next: terminated. */
async function terminateOpenWorkflows(ctx: CaseContext): Promise<void> {
  for await (const w of ctx.client.workflow.list({ query: `TaskQueue="${ctx.taskQueue}" AND ExecutionStatus="Running"` })) {
    await ctx.client.workflow
      .getHandle(w.workflowId, w.runId)
      .terminate('conformance case failed')
      .catch(() => undefined);
  }
}

async function main(argv: string[]): Promise<number> {
  const options = parseOptions(argv);
  keepFiles = options.keep;
  const started = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-conformance-'));
  const teardown = new Teardown(log);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    // `on`, not `once`: a Ctrl-C may arrive twice (from the terminal and relayed by tsx); the teardown runs once.
    process.on(signal, () => {
      log(`${signal}: stopping everything started`);
      void teardown.run(true).then(() => process.exit(130));
    });
  }
  // Compiles take long on SkyRL (JAX on CPU, once per shape); a case past this is stuck.
  const caseLimitMs = (options.against === 'skyrl' ? 20 : 5) * 60_000;
  let passed = 0;
  let failed = 0;
  try {
    let ctx: CaseContext;
    try {
      ctx = await setUp(options, dir, teardown);
    } catch (err) {
      process.stdout.write(`FAIL setup: ${reasonOf(err)}\n`);
      failed += 1;
      keepFiles = true;
      return 1;
    }
    for (const c of CASES.filter((c) => !options.only || options.only.includes(c.name))) {
      const t = Date.now();
      let timer: NodeJS.Timeout | undefined;
      try {
        const limit = new Promise<never>((_resolve, reject) => {
          timer = setTimeout(() => reject(new Error(`no result after ${caseLimitMs / 1000} s`)), caseLimitMs);
        });
        const figures = await Promise.race([c.run(ctx), limit]);
        const loaded = await ctx.target.loadedModels();
        process.stdout.write(`PASS ${c.name} ${seconds(t)} s ${figures}; models loaded after: ${loaded.length}\n`);
        passed += 1;
      } catch (err) {
        process.stdout.write(`FAIL ${c.name}: ${reasonOf(err)} (after ${seconds(t)} s)\n`);
        failed += 1;
        keepFiles = true;
        await terminateOpenWorkflows(ctx).catch(() => undefined);
      } finally {
        clearTimeout(timer);
      }
    }
    return failed === 0 ? 0 : 1;
  } finally {
    await teardown.run(keepFiles);
    if (keepFiles)
      log(
        `kept for inspection: ${dir} (worker.log, reports)${options.against === 'skyrl' ? ', and the SkyRL server files named above' : ''}`,
      );
    else fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`total ${seconds(started)} s\n${passed} passed, ${failed} failed\n`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.stdout.write('0 passed, 1 failed\n');
    process.exit(1);
  },
);

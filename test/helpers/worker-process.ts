import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SHARED_BUNDLE_ENV, writeWorkflowBundle } from './temporal';
import { distCli } from './dist';
import type { WorkflowHandle } from '@temporalio/client';
import { attemptWasInterrupted, runningActivities, type RunningActivity } from './running-activities';

/** A file of the bundled workflows that worker processes load (no webpack at each start): the run's shared one. */
export async function bundleToFile(): Promise<string> {
  const shared = process.env[SHARED_BUNDLE_ENV];
  if (shared) return path.join(shared, 'workflow-bundle.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-bundle-'));
  await writeWorkflowBundle(dir);
  return path.join(dir, 'workflow-bundle.js');
}

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves once the worker polls its task queue. */
  ready: Promise<void>;
  output(): string;
  /** SIGKILL: no graceful shutdown, no heartbeat, nothing flushed. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A real `roundhouse worker` process on its own task queue, from the compiled CLI (dist/, built once by the global
 * setup: a second faster to start than the TypeScript sources through tsx); `script` runs another entry point with
 * the same command line (bin/roundhouse.js); `args` are extra `worker` arguments. The reaper schedule is left alone
 * (`--no-reaper`) unless `reaper` or the args say otherwise. `privateHost` runs it as if on a host of its own: in a
 * mount namespace with a private, empty /tmp (`unshare`; see privateHostsAvailable), its working directory and
 * ROUNDHOUSE_STATE_DIR inside it, so no file it writes can be seen by any other process.
 */
export function startWorkerProcess(
  env: Record<string, string>,
  options: { script?: string; args?: string[]; reaper?: boolean; cwd?: string; privateHost?: boolean } = {},
): WorkerProcess {
  // The reaper is on by default; tests that measure a round's own cleanup keep it off unless it is what they test.
  const args = options.args ?? [];
  const reaperArgs = options.reaper || args.some((a) => a.startsWith('--reaper') || a === '--no-reaper') ? [] : ['--no-reaper'];
  const command = [process.execPath, options.script ?? distCli, 'worker', ...args, ...reaperArgs];
  // unshare and sh exec in place: the child's pid is the worker's (the pid in its Temporal identity).
  const [file, ...argv] = options.privateHost ? [...PRIVATE_HOST, ...command] : command;
  const child = spawn(file!, argv, {
    env: {
      ...process.env,
      ROUNDHOUSE_LOG_LEVEL: 'info',
      ...env,
      ...(options.privateHost ? { ROUNDHOUSE_STATE_DIR: '/tmp/host/state' } : {}),
    },
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  child.once('exit', () => live.delete(child));
  let out = '';
  const ready = new Promise<void>((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      if (out.includes('worker started')) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    child.once('exit', (code) => reject(new Error(`worker exited (${code}) before it was ready:\n${out.slice(-3000)}`)));
  });
  ready.catch(() => undefined);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    ready,
    output: () => out,
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Workers still running when this process exits (a benchmark past its bound, a test that threw) die with it. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

const PRIVATE_HOST = [
  'unshare',
  '--mount',
  '--propagation',
  'private',
  'sh',
  '-c',
  'mount -t tmpfs host-tmp /tmp && mkdir -p /tmp/host/state /tmp/host/cwd && cd /tmp/host/cwd && exec "$@"',
  'private-host',
];

let privateHosts: boolean | undefined;

/**
 * Whether this machine lets a process have its own /tmp (root or CAP_SYS_ADMIN, unshare installed, and the checkout
 * and node outside /tmp).
 */
export function privateHostsAvailable(): boolean {
  // The private /tmp hides whatever is under /tmp: the checkout (and node) must live elsewhere.
  const hidden = [distCli, process.execPath].some((f) => fs.realpathSync(f).startsWith('/tmp/'));
  privateHosts ??= !hidden && spawnSync(PRIVATE_HOST[0]!, [...PRIVATE_HOST.slice(1), 'true'], { timeout: 10_000 }).status === 0;
  return privateHosts;
}

/** Environment of the `roundhouse worker` processes crash tests kill: a fast sticky-queue takeover. */
export function crashTestWorkerEnv(taskQueue: string, bundleFile: string): Record<string, string> {
  return {
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_WORKFLOW_BUNDLE: bundleFile,
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-crash-state-')),
    ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: '500',
  };
}

export interface KillPoint<P> {
  name: string;
  when: (progress: P) => boolean;
  /**
   * Where the kill must land: inside a running attempt of an activity of this type on the worker killed (for a
   * training segment, with its latest heartbeat at round step ≥ `fromStep`). Checked right before the SIGKILL (it needs
   * the `workflow` option), and proven after it by the server: that attempt never finished, a later one ran. A kill
   * that came too late (the attempt had finished) is counted but does not hit the point: it is tried again.
   */
  inside?: { activity: RegExp; fromStep?: number };
}

/** What became of a kill point: whether a kill hit it, and where (or why not). */
export interface KillOutcome {
  point: string;
  hit: boolean;
  detail: string;
  /** The activity attempt the kill interrupted (points with `inside`). */
  activity?: RunningActivity;
}

/**
 * Walks a workflow through kill points: polls its progress until a point's condition holds (and, for a point with
 * `inside`, its activity runs on the current worker), SIGKILLs the worker process (after `jitterMs` of the hit, to land
 * inside the step), starts a fresh one, and goes on. Bounded by `perPointMs` per point. Every point's outcome is
 * returned, and `missed` names the points no kill hit (passed while a worker restarted, beyond reach, out of time): a
 * test requires it to be empty, so a point never skips silently. Also returns the worker now running and every kill.
 */
export async function killAtPoints<P>(options: {
  points: KillPoint<P>[];
  progress: () => Promise<P | undefined>;
  worker: WorkerProcess;
  env: Record<string, string>;
  describe: (progress: P) => string;
  beyond?: (progress: P) => boolean;
  jitterMs?: (progress: P) => number;
  perPointMs?: number;
  /** The workflow whose activities `inside` points look at. */
  workflow?: WorkflowHandle;
  /** Told of each kill as it happens (a test's log). */
  log?: (line: string) => void;
}): Promise<{ worker: WorkerProcess; kills: string[]; outcomes: KillOutcome[]; missed: string[] }> {
  let worker = options.worker;
  const kills: string[] = [];
  const outcomes: KillOutcome[] = [];
  const log = options.log ?? (() => undefined);
  /** What a kill at the point would hit now: its activity's attempt on the current worker (none needed: {}), or undefined. */
  const target = async (point: KillPoint<P>, fromStep: number): Promise<{ activity?: RunningActivity } | undefined> => {
    if (!point.inside) return {};
    if (!options.workflow) throw new Error(`kill point ${point.name}: an inside point needs the workflow option`);
    const pid = worker.child.pid;
    const activity = (await runningActivities(options.workflow)).find(
      (a) => point.inside!.activity.test(a.type) && a.workerPid === pid && (a.heartbeatStep ?? 0) >= fromStep,
    );
    return activity && { activity };
  };
  for (const point of options.points) {
    const deadline = Date.now() + (options.perPointMs ?? 90_000);
    let outcome: KillOutcome = { point: point.name, hit: false, detail: 'not reached in time' };
    let killedTooLate = false;
    while (!outcome.hit && Date.now() < deadline) {
      const p = await options.progress();
      if (p && !point.when(p) && (killedTooLate || options.beyond?.(p))) {
        outcome.detail = `${killedTooLate ? 'killed too late, then ' : ''}the workflow went beyond it (${options.describe(p)})`;
        break;
      }
      const hit = p && point.when(p) ? await target(point, point.inside?.fromStep ?? 0) : undefined;
      if (!p || !hit) {
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      const jitter = options.jitterMs?.(p) ?? 0;
      if (jitter > 0) await new Promise((r) => setTimeout(r, jitter));
      let activity = hit.activity;
      if (activity) {
        // Still inside the same attempt after the jitter? Otherwise the point is looked for again.
        const now = (await target(point, 0))?.activity;
        if (now?.activityId !== activity.activityId || now.attempt !== activity.attempt) continue;
        // The step it had reached: a heartbeat without details (a keep-alive) may have blanked it since.
        activity = { ...now, heartbeatStep: Math.max(activity.heartbeatStep ?? 0, now.heartbeatStep ?? 0) };
      }
      const where = `${options.describe(p)}${activity ? `, ${activity.type} #${activity.activityId} attempt ${activity.attempt} at heartbeat step ${activity.heartbeatStep}` : ''}`;
      await worker.kill();
      worker = startWorkerProcess(options.env);
      await worker.ready;
      const landed = !activity || (await attemptWasInterrupted(options.workflow!, activity.activityId, activity.attempt));
      kills.push(`${point.name} (${where})${landed ? '' : ' [too late: the attempt had finished]'}`);
      log(`kill: ${kills[kills.length - 1]}`);
      if (landed) outcome = { point: point.name, hit: true, detail: where, ...(activity ? { activity } : {}) };
      killedTooLate = !landed;
    }
    if (!outcome.hit) log(`kill point missed: ${point.name}: ${outcome.detail}`);
    outcomes.push(outcome);
  }
  return { worker, kills, outcomes, missed: outcomes.filter((o) => !o.hit).map((o) => `${o.point}: ${o.detail}`) };
}

/**
 * Kill points walked one at a time, each on the worker running then (killAtPoints starts the next one): the worker
 * now running, every kill made and every point no kill hit (a test requires `missed` empty).
 */
export class KillSequence {
  readonly kills: string[] = [];
  readonly missed: string[] = [];

  constructor(
    public worker: WorkerProcess,
    private readonly env: Record<string, string>,
    private readonly log: (line: string) => void,
  ) {}

  /** Walks one workflow to one kill point and kills the worker running there; the next worker carries on. */
  async at<P>(
    point: KillPoint<P>,
    options: Omit<Parameters<typeof killAtPoints<P>>[0], 'points' | 'worker' | 'env' | 'log'>,
  ): Promise<void> {
    const killed = await killAtPoints({
      ...options,
      points: [point],
      worker: this.worker,
      env: this.env,
      log: this.log,
      perPointMs: 90_000,
    });
    this.worker = killed.worker;
    this.kills.push(...killed.kills);
    this.missed.push(...killed.missed);
  }
}

import fs from 'node:fs';
import { SEGMENT_ACTIVITIES } from '../config/rules/round-kinds';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime, type Worker } from '@temporalio/worker';
import { DEFAULT_SEGMENT_SECONDS, DEFAULT_SEGMENT_STEPS } from '../config/io/spec';
import { loadWorkerSettings, type WorkerSettings } from '../config/io/worker-env';
import { startEmulator, type EmulatorOptions, type RunningEmulator } from '../emulator/server';
import { ProviderRegistry } from '../workers/providers';
import { connectClient, connectWorker, startTemporal, type TemporalServer } from '../workers/temporal-server';
import { createRoundhouseWorker } from '../workers/worker';
import type { RoundInput } from '../workflows/round/contract';
import { ticketRoundInput } from '../test/helpers/round';
import { ensureDist } from '../test/helpers/dist';
import { bundleToFile } from '../test/helpers/worker-process';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
type History = temporal.api.history.v1.IHistory;

/** What every benchmark gets: its own dev server, clients, and the workflows bundled once. */
export interface BenchContext {
  settings: WorkerSettings;
  server: TemporalServer;
  client: Client;
  nativeConnection: NativeConnection;
  bundleFile: string;
  /** Tiny sizes (the harness self-test): the same code paths, fewer steps and rounds. */
  quick: boolean;
  scratch: string;
  close(): Promise<void>;
}

export async function startBench(options: { quick: boolean }): Promise<BenchContext> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  // Always a dev server of our own (never TEMPORAL_ADDRESS): history counts and timings must be ours alone.
  const env = { ...process.env };
  delete env.TEMPORAL_ADDRESS;
  const base = loadWorkerSettings(env);
  const server = await startTemporal(base);
  const settings: WorkerSettings = { ...base, address: server.address };
  const connection: Connection = await connectClient(settings);
  const nativeConnection = await connectWorker(settings);
  ensureDist(); // worker processes run the compiled CLI: never a stale build of the code measured
  const bundleFile = await bundleToFile();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-bench-'));
  return {
    settings,
    server,
    client: new Client({ connection, namespace: settings.namespace }),
    nativeConnection,
    bundleFile,
    quick: options.quick,
    scratch,
    async close() {
      await connection.close();
      await nativeConnection.close();
      await server.stop();
      fs.rmSync(scratch, { recursive: true, force: true });
    },
  };
}

export interface Figure {
  name: string;
  value: number | string;
  /** e.g. '≤ 1.03'; 'info' for figures without a target. */
  target: string;
  met?: boolean;
}

/** One `name: value (target)` line per figure, as BENCHMARKS.md records them. */
export function formatFigure(f: Figure): string {
  const value = typeof f.value === 'number' ? formatNumber(f.value) : f.value;
  const verdict = f.met === undefined ? '' : f.met ? ', met' : ', MISSED';
  return `${f.name}: ${value} (${f.target}${verdict})`;
}

function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(3);
}

export type Report = (f: Figure) => void;

/** Progress notes go to stderr, so stdout holds the figures only. */
export function note(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

export function startBenchEmulator(options: EmulatorOptions): Promise<RunningEmulator> {
  return startEmulator({ port: 0, host: '127.0.0.1', ...options });
}

/**
 * A round of exactly `steps` optimizer steps over the support-ticket data: `stepsPerEpoch` batches of
 * `batchSize` rows, `steps / stepsPerEpoch` epochs; few eval rows, so sampling stays short.
 */
export function benchRoundInput(options: {
  baseUrl: string;
  campaignId: string;
  steps: number;
  batchSize?: number;
  stepsPerEpoch?: number;
  evalRows?: number;
  segmentSteps?: number;
  segmentSeconds?: number;
  heartbeatTimeoutSeconds?: number;
}): RoundInput {
  const batchSize = options.batchSize ?? 4;
  const stepsPerEpoch = Math.min(options.steps, options.stepsPerEpoch ?? 10);
  if (options.steps % stepsPerEpoch !== 0) throw new Error(`steps (${options.steps}) must be a multiple of ${stepsPerEpoch}`);
  const input = ticketRoundInput({
    baseUrl: options.baseUrl,
    campaignId: options.campaignId,
    trainRows: batchSize * stepsPerEpoch,
    evalRows: options.evalRows ?? 4,
    heartbeatTimeoutSeconds: options.heartbeatTimeoutSeconds ?? 30,
  });
  const t = input.spec.training;
  t.batchSize = batchSize;
  t.epochs = options.steps / stepsPerEpoch;
  // The spec's defaults, unless a benchmark sizes segments itself.
  t.segmentSteps = options.segmentSteps ?? DEFAULT_SEGMENT_STEPS;
  t.segmentSeconds = options.segmentSeconds ?? DEFAULT_SEGMENT_SECONDS;
  return input;
}

/** An in-process worker on its own task queue, running while `fn` runs. */
export async function withWorker<T>(
  ctx: BenchContext,
  taskQueue: string,
  fn: (worker: Worker) => Promise<T>,
  registry?: ProviderRegistry,
): Promise<T> {
  const providers = registry ?? new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(ctx.scratch, 'worker-')) });
  const worker = await createRoundhouseWorker({
    connection: ctx.nativeConnection,
    namespace: ctx.settings.namespace,
    taskQueue,
    workflowBundle: { codePath: ctx.bundleFile },
    providers,
  });
  try {
    return await worker.runUntil(fn(worker));
  } finally {
    await providers.close();
  }
}

const EVENT = {
  activityScheduled: 10,
  activityCompleted: 12,
  workflowTaskCompleted: 7,
  signalExternalInitiated: 37,
} as const;

function eventMs(e: HistoryEvent): number {
  const t = e.eventTime!;
  return Number(t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
}

function activityName(e: HistoryEvent): string | undefined {
  return e.activityTaskScheduledEventAttributes?.activityType?.name ?? undefined;
}

/** The activities that run training segments, by round kind (SFT, GRPO, DPO). */
const SEGMENT_ACTIVITY_NAMES = new Set(SEGMENT_ACTIVITIES);

/**
 * The training phase of a round, read from the server's history: from the first training segment scheduled to
 * the workflow task that handles the last one's completion. Events in that span are the ones training adds
 * (segments, their workflow tasks, progress signals between segments); time runs to the last segment's
 * completion. Everything else is the round's fixed cost (validate, provision, baseline, checkpoint, sample,
 * cleanup, phase signals).
 */
export function trainingPhase(history: History): {
  events: number;
  segments: number;
  ms: number;
  totalEvents: number;
  /** Progress signals the round sent its campaign during the phase (each with its own events). */
  signals: number;
  /** Wall-clock bounds of the phase (epoch ms). */
  startMs: number;
  endMs: number;
} {
  const events = history.events ?? [];
  const segmentIds = new Set<number>();
  let first = -1;
  let lastCompleted = -1;
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    if (e.eventType === EVENT.activityScheduled && SEGMENT_ACTIVITY_NAMES.has(activityName(e) ?? '')) {
      segmentIds.add(Number(e.eventId));
      if (first < 0) first = i;
    }
    if (e.eventType === EVENT.activityCompleted && segmentIds.has(Number(e.activityTaskCompletedEventAttributes?.scheduledEventId)))
      lastCompleted = i;
  }
  if (first < 0 || lastCompleted < 0) throw new Error('no completed trainSegment in this history');
  let end = events.length;
  for (let i = lastCompleted + 1; i < events.length; i++) {
    if (events[i]!.eventType === EVENT.workflowTaskCompleted) {
      end = i + 1;
      break;
    }
  }
  let signals = 0;
  for (let i = first; i < end; i++) if (events[i]!.eventType === EVENT.signalExternalInitiated) signals++;
  return {
    events: end - first,
    signals,
    segments: segmentIds.size,
    ms: eventMs(events[lastCompleted]!) - eventMs(events[first]!),
    totalEvents: events.length,
    startMs: eventMs(events[first]!),
    endMs: eventMs(events[lastCompleted]!),
  };
}

export async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` every `everyMs` until it returns a value or `timeoutMs` passes (then throws naming `what`). */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs: number,
  everyMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** CPU seconds (user + system) a process has used so far, from /proc. */
export function cpuSecondsOf(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

/** Busy CPU seconds of the whole machine so far (every process, ours or not), from /proc/stat. */
export function machineBusySeconds(): number {
  const [, ...ticks] = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const n = ticks.map(Number);
  return (n.reduce((a, v) => a + v, 0) - n[3]! - n[4]!) / 100;
}

/** Child processes of this one with the given command name (e.g. the dev server, `temporal`). */
export function childPids(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (name === comm && ppid === process.pid) pids.push(Number(entry));
    } catch {
      /* gone */
    }
  }
  return pids;
}

/** CPU used between `begin()` and `end()` by this process (emulator, client), given pids, and the machine. */
export function cpuMeter(pids: Record<string, number | undefined>): { end(): Record<string, number> } {
  const read = () => {
    const out: Record<string, number> = {
      bench_process: process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6,
      machine: machineBusySeconds(),
    };
    for (const [name, pid] of Object.entries(pids)) if (pid !== undefined) out[name] = cpuSecondsOf(pid);
    return out;
  };
  const start = read();
  return {
    end() {
      const now = read();
      return Object.fromEntries(Object.entries(now).map(([k, v]) => [k, v - (start[k] ?? 0)]));
    },
  };
}

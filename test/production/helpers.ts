import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';
import { distCli, ensureDist } from '../helpers/dist';

export const root = path.resolve(__dirname, '../..');
export { distCli };

/** dist/ and the prebuilt dist/workflow-bundle.js, current (the global setup built them once for the run). */
export function buildDist(): void {
  ensureDist();
}

/** A compiled (`dist/`) `roundhouse worker` process, as the Docker image runs it. */
export function startDistWorker(env: Record<string, string>, args: string[] = []): WorkerProcess {
  return startWorkerProcess(
    { ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-prod-state-')), ...env },
    { script: distCli, args },
  );
}

export { progressOf } from '../helpers/round';

/** Polls until `check` returns a value (bounded by `timeoutMs`). */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 60_000, everyMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** The process id of the worker running the round's training segment right now (from the pending activity). */
export async function trainingWorkerPid(handle: WorkflowHandle): Promise<number | undefined> {
  const description = await handle.describe();
  const pending = description.raw.pendingActivities?.find((a) =>
    ['trainSegment', 'trainGrpoSegment', 'trainDpoSegment'].includes(a.activityType?.name ?? ''),
  );
  const identity = pending?.lastWorkerIdentity ?? '';
  const pid = Number(identity.split('@')[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Prometheus text → samples by name (labels kept as the raw `{...}` string). */
export function parseMetrics(text: string): Map<string, { labels: string; value: number }[]> {
  const out = new Map<string, { labels: string; value: number }[]>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/.exec(line.trim());
    if (!m) continue;
    const list = out.get(m[1]!) ?? [];
    list.push({ labels: m[2] ?? '', value: Number(m[3]) });
    out.set(m[1]!, list);
  }
  return out;
}

export async function scrape(address: string): Promise<Map<string, { labels: string; value: number }[]>> {
  const res = await fetch(`http://${address}/metrics`);
  if (!res.ok) throw new Error(`metrics endpoint answered ${res.status}`);
  return parseMetrics(await res.text());
}

export function total(metrics: Map<string, { labels: string; value: number }[]>, name: string, labelFilter = ''): number {
  return (metrics.get(name) ?? []).filter((s) => s.labels.includes(labelFilter)).reduce((a, s) => a + s.value, 0);
}

import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { startEmulator, type EmulatorOptions, type RunningEmulator } from '../../emulator/server';
import type { Ledger } from '../../emulator/engine';
import { BasetenProvider } from '../../providers/baseten/client';
import { TinkerProvider } from '../../providers/tinker/client';
import { TogetherProvider } from '../../providers/together/client';

export type { RunningEmulator } from '../../emulator/server';

/** An in-process emulator on a free loopback port. */
export function startTestEmulator(options: EmulatorOptions = {}): Promise<RunningEmulator> {
  return startEmulator({ port: 0, host: '127.0.0.1', ...options });
}

/** 429, 500, 503, connection resets and lost responses, each on 10 % of requests (seeded). */
export function tenPercentFaults(seed: number) {
  return {
    seed,
    rules: [
      { kind: 'http-429', rate: 0.1, max: 1000, retryAfterMs: 5 },
      { kind: 'http-500', rate: 0.1, max: 1000 },
      { kind: 'http-503', rate: 0.1, max: 1000, retryAfterMs: 5 },
      { kind: 'reset', rate: 0.1, max: 1000 },
      { kind: 'lose-response', rate: 0.1, max: 1000 },
    ],
  };
}

/** How many faults the emulator injected, by kind, and in all. */
export async function firedFaults(emulator: RunningEmulator): Promise<{ total: number; summary: string }> {
  const fired = ((await (await fetch(`${emulator.url}/_emulator/faults`)).json()) as { fired: { kind: string; fired: number }[] }).fired;
  return { total: fired.reduce((a, f) => a + f.fired, 0), summary: fired.map((f) => `${f.kind}=${f.fired}`).join(' ') };
}

/** A fresh API key: the emulator derives the owner from it, so each test sees only its own resources. */
export function testApiKey(): string {
  return `test-key-${randomUUID()}`;
}

export function togetherProvider(emulator: RunningEmulator, apiKey = testApiKey()): TogetherProvider {
  return new TogetherProvider({
    baseUrl: emulator.url,
    apiKey,
    pollIntervalMs: 5,
    maxPollIntervalMs: 50,
    initialRetryDelayMs: 5,
    maxRetryDelayMs: 50,
  });
}

export function basetenProvider(emulator: RunningEmulator, apiKey = testApiKey()): BasetenProvider {
  return new BasetenProvider({
    baseUrl: emulator.url,
    apiKey,
    pollIntervalMs: 5,
    maxPollIntervalMs: 50,
    initialRetryDelayMs: 5,
    maxRetryDelayMs: 50,
  });
}

export async function ledger(emulator: RunningEmulator): Promise<Ledger> {
  const res = await request(`${emulator.url}/_emulator/ledger`);
  return (await res.body.json()) as Ledger;
}

export async function setFaults(emulator: RunningEmulator, config: unknown): Promise<void> {
  const res = await request(`${emulator.url}/_emulator/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(config),
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`fault configuration refused: ${res.statusCode} ${text}`);
}

/** Raw HTTP against the emulator (a path, or an absolute URL it handed out), for wire-level assertions. */
export async function raw(
  emulator: RunningEmulator,
  method: 'GET' | 'POST' | 'PATCH',
  path: string,
  options: {
    apiKey?: string | null;
    scheme?: 'Bearer' | 'Api-Key';
    body?: string | object;
    idempotencyKey?: string;
    headers?: Record<string, string>;
  } = {},
): Promise<{ status: number; json: any; headers: Record<string, string | string[] | undefined> }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
  if (options.apiKey !== null) headers.authorization = `${options.scheme ?? 'Bearer'} ${options.apiKey ?? 'raw-key'}`;
  if (options.idempotencyKey) headers['idempotency-key'] = options.idempotencyKey;
  const res = await request(path.startsWith('http') ? path : `${emulator.url}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : typeof options.body === 'string' ? options.body : JSON.stringify(options.body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** A fresh Tinker key (`tml-…`, as the service issues them): its own owner on the emulator. */
export function testTinkerKey(): string {
  return `tml-${randomUUID()}`;
}

export function tinkerProvider(emulator: RunningEmulator, apiKey = testTinkerKey()): TinkerProvider {
  return new TinkerProvider({ baseUrl: emulator.url, apiKey, initialRetryDelayMs: 5, maxRetryDelayMs: 50 });
}

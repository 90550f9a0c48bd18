import { z } from 'zod';
import { ProviderError } from '../errors';
import { poll } from '../http';
import type { AwaitOptions } from '../types';
import { AnyJson, type TinkerApi } from './auth';
import { LISTED, retrieve } from './futures';

/** `GET training_runs/{model}/checkpoints`: the model's completed checkpoints. */
export async function checkpointsOf(
  api: TinkerApi,
  modelId: string,
): Promise<{ checkpoint_type: string; time: string; tinker_path: string }[]> {
  const res = await api.call({
    method: 'GET',
    path: `/api/v1/training_runs/${encodeURIComponent(modelId)}/checkpoints`,
    schema: z.object({
      checkpoints: z.array(z.object({ checkpoint_type: z.string(), time: z.string(), tinker_path: z.string() }).passthrough()),
    }),
  });
  return res.checkpoints;
}

/** The model's training checkpoints (`tinker://…/weights/…`), oldest first. */
export async function trainingCheckpoints(api: TinkerApi, modelId: string): Promise<string[]> {
  return (await checkpointsOf(api, modelId))
    .filter((c) => c.checkpoint_type === 'training')
    .sort((a, b) => a.time.localeCompare(b.time))
    .map((c) => c.tinker_path);
}

/**
 * A save's submit. A server that keeps no seq for saves (SkyRL) answers the resend of a save whose answer was lost
 * with 409 "already exists": the checkpoint is then the one being saved, and its handle (`listed:<path>`) waits for
 * it in the model's checkpoint listing instead of a future.
 */
export async function save(path: string, send: () => Promise<{ request_id: string }>): Promise<{ request_id: string }> {
  try {
    return await send();
  } catch (err) {
    if (!(err instanceof ProviderError && err.status === 409 && /already exists/i.test(err.message))) throw err;
    return { request_id: `${LISTED}${path}` };
  }
}

/** Waits until the model's checkpoint listing (completed checkpoints) holds `path`. */
export async function listed(api: TinkerApi, path: string, options: AwaitOptions): Promise<void> {
  const modelId = parseCheckpointPath(path)?.modelId ?? '';
  await poll(
    async () => ((await checkpointsOf(api, modelId)).some((c) => c.tinker_path === path) ? true : undefined),
    `Tinker checkpoint ${path}`,
    { initialIntervalMs: 100, maxIntervalMs: 2_000, timeoutMs: options.timeoutMs ?? 600_000, signal: options.signal },
  );
}

/** A save's path: its future's result, or (`listed:<path>`, a save found already made) once the listing holds it. */
export async function savedPath(api: TinkerApi, requestPart: string, type: string, options: AwaitOptions): Promise<string> {
  if (!requestPart.startsWith(LISTED)) {
    const { json } = await retrieve(api, requestPart, type, options);
    return z.object({ path: z.string() }).passthrough().parse(json).path;
  }
  const path = requestPart.slice(LISTED.length);
  await listed(api, path, options);
  return path;
}

/** `DELETE training_runs/{model}/checkpoints/{weights|sampler_weights}/{name}`; one already gone is fine. */
export async function deleteCheckpoint(api: TinkerApi, checkpointId: string): Promise<void> {
  const m = parseCheckpointPath(checkpointId);
  if (!m)
    throw new ProviderError(
      'INVALID_INPUT',
      'non-retryable',
      `${checkpointId} is not a tinker://<model>/[weights|sampler_weights/]<name> path`,
    );
  try {
    await api.call({
      method: 'DELETE',
      path: `/api/v1/training_runs/${encodeURIComponent(m.modelId)}/checkpoints/${m.kind}/${encodeURIComponent(m.name)}`,
      schema: AnyJson,
      replaySafe: true,
    });
  } catch (err) {
    if (!(err instanceof ProviderError && err.status === 404)) throw err;
  }
}

/**
 * A checkpoint's path: `tinker://<model>/<weights|sampler_weights>/<name>`, or `tinker://<model>/<name>`, which SkyRL
 * answers a named sampler save with (a sampler checkpoint).
 */
export function parseCheckpointPath(path: string): { modelId: string; kind: 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(?:(weights|sampler_weights)\/)?([^/]+)$/.exec(path);
  return m ? { modelId: m[1]!, kind: (m[2] as 'weights' | 'sampler_weights' | undefined) ?? 'sampler_weights', name: m[3]! } : undefined;
}

/** A checkpoint's path in the form listings use (`…/sampler_weights/<name>` for SkyRL's short sampler form). */
export function canonicalPath(path: string): string {
  const p = parseCheckpointPath(path);
  return p ? `tinker://${p.modelId}/${p.kind}/${p.name}` : path;
}

/** The step a checkpoint holds, from its name (`…-st<step>`); 0 for a checkpoint Roundhouse did not name. */
export function checkpointStep(path: string): number {
  const m = /-st(\d+)$/.exec(path);
  return m ? Number(m[1]) : 0;
}

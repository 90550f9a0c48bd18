import { createHmac, randomBytes } from 'node:crypto';
import type { Engine } from '../engine';
import type { Router } from '../http';
import { addLoopsControlRoutes } from './control';
import { addLoopsDataRoutes } from './dataplane';
import { LoopsState } from './state';

/**
 * Baseten Loops on top of the engine: the control plane (`/v1/loops/*`), each run's trainer and each
 * sampler's data plane (`/baseten/trainers/<run>`, `/baseten/samplers/<id>/sync`, handed out as `base_url`s),
 * and presigned checkpoint file links (`/baseten/files/…`). Wire shapes: providers/baseten/WIRE.md.
 */

export interface LoopsOptions {
  /** How long a trainer's `GET /operations/{id}` holds an unfinished operation before 408 (default 25 s). */
  pollHoldMs?: number;
}

export function addBasetenRoutes(router: Router, engine: Engine, options: LoopsOptions = {}): { close(): void } {
  const state = new LoopsState(engine);
  const secret = randomBytes(16);
  const signer = {
    sign: (checkpointId: string, file: string) => createHmac('sha256', secret).update(`${checkpointId}/${file}`).digest('hex').slice(0, 32),
  };
  const closing = new AbortController();
  addLoopsControlRoutes(router, engine, state, signer);
  addLoopsDataRoutes(router, engine, state, { pollHoldMs: options.pollHoldMs ?? 25_000, closing: closing.signal });
  return {
    close() {
      closing.abort();
    },
  };
}

import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';

let ready: Promise<void> | undefined;

/**
 * Selects TF.js's WASM backend for this process, once. The backend is process-global in TF.js: whatever else
 * in the process uses tfjs-core runs on it too.
 */
export function ensureWasmBackend(): Promise<void> {
  ready ??= selectWasm().catch((err: unknown) => {
    ready = undefined; // a later call may retry
    throw err;
  });
  return ready;
}

async function selectWasm(): Promise<void> {
  if (tf.engine().backendName === 'wasm') return; // reading backendName does not initialise anything
  setWasmPaths(path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm')) + path.sep);
  if (!(await tf.setBackend('wasm'))) throw new Error('TF.js WASM backend failed to initialise');
  await tf.ready();
}

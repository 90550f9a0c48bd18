import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
import { registerLearnerGradients } from './gradients';

let ready: Promise<void> | undefined;

/**
 * Selects TF.js's WASM backend for this process and registers the gradients autodiff needs, once. Both are
 * process-global in TF.js: whatever else in the process uses tfjs-core runs on them too.
 */
export function ensureWasmBackend(): Promise<void> {
  ready ??= selectWasm().catch((err: unknown) => {
    ready = undefined; // a later call may retry
    throw err;
  });
  return ready;
}

async function selectWasm(): Promise<void> {
  registerLearnerGradients();
  if (tf.engine().backendName === 'wasm') return; // reading backendName does not initialise anything
  setWasmPaths(path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm')) + path.sep);
  const uncaught = process.listeners('uncaughtException');
  const rejection = process.listeners('unhandledRejection');
  try {
    if (!(await tf.setBackend('wasm'))) throw new Error('TF.js WASM backend failed to initialise');
    await tf.ready();
  } finally {
    // Emscripten's loader adds process handlers that rethrow every uncaught error; the host keeps its own policy.
    for (const listener of process.listeners('uncaughtException')) {
      if (!uncaught.includes(listener)) process.removeListener('uncaughtException', listener);
    }
    for (const listener of process.listeners('unhandledRejection')) {
      if (!rejection.includes(listener)) process.removeListener('unhandledRejection', listener);
    }
  }
}

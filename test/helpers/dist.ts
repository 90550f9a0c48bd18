import { execFileSync } from 'node:child_process';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
// eslint-disable-next-line @typescript-eslint/no-require-imports
const distState = require('../../scripts/dist-state.js') as { distIsFresh(): boolean };

/** The compiled CLI (`dist/`), run as the Docker image and an installed package run it: no TypeScript, no tsx. */
export const distCli = path.join(root, 'test', 'production', 'dist-cli.js');

/**
 * `npm run build` unless dist/ is newer than every source file: run once by the global setup, so test files share
 * one build (tsc and the workflow bundle cost ~30 CPU-seconds) and start worker and CLI processes from it.
 */
export function ensureDist(): { built: boolean; ms: number } {
  const started = Date.now();
  if (distState.distIsFresh()) return { built: false, ms: Date.now() - started };
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: root, stdio: 'pipe', timeout: 300_000 }); // stamps dist/
  return { built: true, ms: Date.now() - started };
}

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
const SOURCES = ['workflows', 'activities', 'workers', 'config', 'providers', 'emulator', 'cli'];
const stamp = path.join(root, 'dist', '.built-from-sources');

/** The compiled CLI (`dist/`), run as the Docker image and an installed package run it: no TypeScript, no tsx. */
export const distCli = path.join(root, 'test', 'production', 'dist-cli.js');

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(full));
    else newest = Math.max(newest, fs.statSync(full).mtimeMs);
  }
  return newest;
}

/**
 * `npm run build` unless dist/ is newer than every source file: run once by the global setup, so test files share
 * one build (tsc and the workflow bundle cost ~30 CPU-seconds) and start worker and CLI processes from it.
 */
export function ensureDist(): { built: boolean; ms: number } {
  const started = Date.now();
  const sources = Math.max(
    ...SOURCES.map((d) => newestSource(path.join(root, d))),
    ...['package.json', 'tsconfig.json', 'tsconfig.build.json'].map((f) => fs.statSync(path.join(root, f)).mtimeMs),
  );
  if (fs.existsSync(stamp) && fs.statSync(stamp).mtimeMs > sources) return { built: false, ms: Date.now() - started };
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: root, stdio: 'pipe', timeout: 300_000 });
  fs.writeFileSync(stamp, `${new Date().toISOString()}\n`);
  return { built: true, ms: Date.now() - started };
}

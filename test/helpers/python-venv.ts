import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');

/**
 * A Python virtual environment under .roundhouse/venvs/<name> with exactly these pinned packages, created once
 * and reused (a marker file records what was installed). Used to run the providers' official SDKs as real clients.
 */
export function ensureVenv(name: string, requirements: string[]): string {
  const dir = path.join(process.env.ROUNDHOUSE_STATE_DIR ? path.resolve(process.env.ROUNDHOUSE_STATE_DIR) : path.join(root, '.roundhouse'), 'venvs', name);
  const python = path.join(dir, 'bin', 'python');
  const marker = path.join(dir, 'roundhouse-requirements.txt');
  const wanted = requirements.join('\n');
  if (fs.existsSync(python) && fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === wanted) return python;
  fs.rmSync(dir, { recursive: true, force: true });
  execFileSync('python3', ['-m', 'venv', dir], { stdio: 'inherit' });
  execFileSync(python, ['-m', 'pip', 'install', '--disable-pip-version-check', '-q', ...requirements], { stdio: 'inherit', timeout: 600_000 });
  fs.writeFileSync(marker, wanted);
  return python;
}

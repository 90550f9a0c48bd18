import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { joinLocation, storeFor, writeJson } from '../../config/io/artifacts';

// The store holds test-set answers and episode tokens; a sandboxed program runs as another uid on the same host.
test('the directory store writes no file or directory the world can read, whatever the umask allows', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-store-modes-'));
  const previous = process.umask(0o022); // the usual umask: it alone would leave files 0644 and directories 0755
  try {
    const answers = joinLocation(root, 'campaign', 'round-1', 'test-answers.json');
    await writeJson(answers, { expected: ['4'] });
    await storeFor(root).write(joinLocation(root, 'gateway', 'episode-token.json'), '{"token":"rhe_x"}', 'application/json');
    for (const dir of ['campaign', 'campaign/round-1', 'gateway']) {
      expect((fs.statSync(path.join(root, dir)).mode & 0o777).toString(8)).toBe('750');
    }
    for (const file of ['campaign/round-1/test-answers.json', 'gateway/episode-token.json']) {
      expect((fs.statSync(path.join(root, file)).mode & 0o777).toString(8)).toBe('640');
    }
  } finally {
    process.umask(previous);
    fs.rmSync(root, { recursive: true, force: true });
  }
});

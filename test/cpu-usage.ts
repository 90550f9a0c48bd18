import fs from 'node:fs';
import path from 'node:path';

// Each test file's CPU time in its jest worker (the emulator and in-process workers included; child processes and the
// Temporal server not), appended for the counts reporter: on 2 cores, CPU is what sets the run's length.
const started = process.cpuUsage();
afterAll(() => {
  const used = process.cpuUsage(started);
  const file = path.join(__dirname, '..', '.roundhouse', 'test-cpu.jsonl');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const testPath = path.relative(path.join(__dirname, '..'), expect.getState().testPath ?? 'unknown');
  fs.appendFileSync(file, `${JSON.stringify({ file: testPath, cpuSeconds: Math.round((used.user + used.system) / 1e5) / 10 })}\n`);
});

'use strict';
// Preloaded (NODE_OPTIONS=--require) into the bench's worker processes when ROUNDHOUSE_BENCH_CPU_PROF=<dir> is set
// (node refuses --cpu-prof in NODE_OPTIONS): profiles the whole process and writes <dir>/worker-<pid>.cpuprofile
// when it exits cleanly (SIGTERM → graceful shutdown). `npx tsx bench/profile-summary.ts <dir>` reads them.
const fs = require('node:fs');
const path = require('node:path');
const inspector = require('node:inspector');

const dir = process.env.ROUNDHOUSE_BENCH_CPU_PROF;
if (dir) {
  const session = new inspector.Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 1000 });
  session.post('Profiler.start');
  process.on('exit', () => {
    // The in-process session answers synchronously, so this completes inside the exit handler.
    session.post('Profiler.stop', (err, result) => {
      if (err || !result) return;
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, `worker-${process.pid}.cpuprofile`), JSON.stringify(result.profile));
    });
  });
}

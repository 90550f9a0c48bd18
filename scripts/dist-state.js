'use strict';
// Whether dist/ was built from the sources as they are now. bin/roundhouse.js runs the compiled CLI when it was (a
// fast start: BENCHMARKS.md measures it), the TypeScript sources through tsx otherwise; the tests' global setup
// builds it when it was not. `npm run build` stamps it (scripts/build-dist.js).
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const SOURCES = ['workflows', 'activities', 'workers', 'config', 'providers', 'emulator', 'cli'];
const FILES = ['package.json', 'tsconfig.json', 'tsconfig.build.json'];
const STAMP = path.join(root, 'dist', '.built-from-sources');

function newest(dir) {
  let latest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(full) : fs.statSync(full).mtimeMs);
  }
  return latest;
}

/** The newest modification time among the sources the build compiles (ms since epoch). */
function newestSource() {
  return Math.max(...SOURCES.map((d) => newest(path.join(root, d))), ...FILES.map((f) => fs.statSync(path.join(root, f)).mtimeMs));
}

/** True when dist/ was stamped after every source last changed. */
function distIsFresh() {
  return fs.existsSync(STAMP) && fs.statSync(STAMP).mtimeMs > newestSource();
}

function stampDist() {
  fs.writeFileSync(STAMP, `${new Date().toISOString()}\n`);
}

module.exports = { distIsFresh, stampDist };

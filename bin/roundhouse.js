#!/usr/bin/env node
'use strict';
// Runs the compiled CLI (dist/, what an installed package has): it starts in a fraction of the time the TypeScript
// sources take through tsx. In a checkout, the sources run instead when dist/ is missing or older than them (or
// ROUNDHOUSE_FROM_SOURCE=1); `npm run build` makes it current.
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const source = path.join(root, 'cli', 'main.ts');
const fromSource =
  fs.existsSync(source) &&
  (process.env.ROUNDHOUSE_FROM_SOURCE === '1' || !require(path.join(root, 'scripts', 'dist-state.js')).distIsFresh());
let entry;
if (fromSource) {
  require('tsx/cjs');
  entry = source;
} else {
  entry = path.join(root, 'dist', 'cli', 'main.js');
}
require(entry)
  .main(process.argv)
  .then((code) => {
    process.exitCode = code;
  });

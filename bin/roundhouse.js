#!/usr/bin/env node
'use strict';
// Runs the TypeScript sources through tsx when they are present (a checkout); the compiled dist otherwise.
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const source = path.join(root, 'cli', 'main.ts');
let entry;
if (fs.existsSync(source)) {
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

#!/usr/bin/env node
'use strict';
// `npm test`'s static checks — ESLint, Prettier, the type check — run side by side (they are independent), each
// one's output printed whole when it ends; exits non-zero when any fails. With `--python`, the Python side's checks
// and pytest (scripts/python-tests.js) run beside them: pytest mostly waits on its subprocesses, so the two phases
// together take about as long as the slower one, where one after the other they took the sum.
const { spawn } = require('node:child_process');
const path = require('node:path');

const bin = (name) => path.join(__dirname, '..', 'node_modules', '.bin', name);
const checks = [
  ['lint', bin('eslint'), ['.']],
  ['format', bin('prettier'), ['--check', '.']],
  ['types', bin('tsc'), ['--noEmit', '-p', 'tsconfig.json']],
];
if (process.argv.includes('--python')) checks.push(['python', process.execPath, [path.join(__dirname, 'python-tests.js')]]);

Promise.all(
  checks.map(
    ([name, command, args]) =>
      new Promise((resolve) => {
        const started = Date.now();
        const child = spawn(command, args, { cwd: path.join(__dirname, '..') });
        let output = '';
        child.stdout.on('data', (d) => (output += d));
        child.stderr.on('data', (d) => (output += d));
        child.on('error', (err) => (output += `${err.message}\n`));
        child.on('close', (code) => {
          const seconds = ((Date.now() - started) / 1000).toFixed(1);
          // The Python checks' own lines (pytest's counts, the sandbox in use) are printed whether or not they passed.
          const shown = code === 0 && name !== 'python' ? '' : output;
          process.stdout.write(`== ${name}: ${code === 0 ? 'ok' : `FAILED (exit ${code})`} in ${seconds} s\n${shown}`);
          resolve(code === 0);
        });
      }),
  ),
).then((results) => {
  process.exitCode = results.every(Boolean) ? 0 : 1;
});

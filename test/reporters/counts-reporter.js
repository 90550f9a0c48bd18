// Writes jest's pass/fail/skip counts to .roundhouse/test-counts.json so .ci/run can print its closing line from
// jest's own results, whatever else the run printed; with every skipped test (test.skip, describe.skip, test.todo,
// a skip decided at run time, the rest of a file with a test.only) by full name, and whether test/skip-allowlist.json
// allows it: CI fails on a skip it does not.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

/** Jest's statuses of a test that did not run. */
const SKIPPED = new Set(['pending', 'skipped', 'todo', 'disabled']);

/** The allow-list's `allowed`: full test name → why it may be skipped. */
function readAllowlist(file) {
  if (!fs.existsSync(file)) return {};
  return JSON.parse(fs.readFileSync(file, 'utf8')).allowed ?? {};
}

class CountsReporter {
  constructor(globalConfig) {
    this.file = path.join(globalConfig.rootDir, '.roundhouse', 'test-counts.json');
    this.cpuFile = path.join(globalConfig.rootDir, '.roundhouse', 'test-cpu.jsonl');
    this.durationsFile = path.join(globalConfig.rootDir, '.roundhouse', 'test-durations.json');
    this.allowlistFile = path.join(globalConfig.rootDir, 'test', 'skip-allowlist.json');
    this.testNamePattern = globalConfig.testNamePattern || null;
  }

  onRunStart() {
    fs.rmSync(this.cpuFile, { force: true });
  }

  onRunComplete(_contexts, results) {
    const cpu = new Map();
    if (fs.existsSync(this.cpuFile))
      for (const line of fs.readFileSync(this.cpuFile, 'utf8').split('\n').filter(Boolean)) {
        const { file, cpuSeconds } = JSON.parse(line);
        cpu.set(file, cpuSeconds);
      }
    const allowed = readAllowlist(this.allowlistFile);
    const skips = results.testResults.flatMap((r) =>
      r.testResults
        .filter((t) => SKIPPED.has(t.status))
        .map((t) => ({
          file: path.relative(process.cwd(), r.testFilePath),
          name: t.fullName,
          status: t.status,
          allowedBecause: Object.hasOwn(allowed, t.fullName) ? allowed[t.fullName] : null,
        })),
    );
    // Every file's wall seconds, longest first: test/durations.json (what test/sequencer.js orders a run by on a
    // machine without jest's cache) is this file of a full run.
    const seconds = Object.fromEntries(
      results.testResults
        .map((r) => [path.relative(process.cwd(), r.testFilePath), Math.round((r.perfStats.end - r.perfStats.start) / 100) / 10])
        .sort((a, b) => b[1] - a[1]),
    );
    const counts = {
      passed: results.numPassedTests,
      failed: results.numFailedTests,
      skipped: results.numPendingTests + results.numTodoTests,
      failedSuites: results.numFailedTestSuites,
      runtimeErrorSuites: results.numRuntimeErrorTestSuites,
      // A run filtered by `-t` reports the tests it left out as skipped: CI runs unfiltered.
      testNamePattern: this.testNamePattern,
      skips,
      notAllowedSkips: skips.filter((s) => s.allowedBecause === null).length,
      // The slowest test files, for keeping CI's time in check.
      slowest: results.testResults
        .map((r) => ({
          file: path.relative(process.cwd(), r.testFilePath),
          seconds: Math.round((r.perfStats.end - r.perfStats.start) / 100) / 10,
          cpuSeconds: cpu.get(path.relative(process.cwd(), r.testFilePath)),
        }))
        .sort((a, b) => b.seconds - a.seconds)
        .slice(0, 12),
    };
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    fs.writeFileSync(this.durationsFile, `${JSON.stringify({ seconds }, null, 2)}\n`);
    const partial = `${this.file}.${process.pid}`;
    fs.writeFileSync(partial, JSON.stringify(counts));
    fs.renameSync(partial, this.file);
  }
}

module.exports = CountsReporter;

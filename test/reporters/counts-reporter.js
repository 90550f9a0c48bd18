// Writes jest's pass/fail counts to .roundhouse/test-counts.json so .ci/run can print its closing line
// from jest's own results, whatever else the run printed.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

class CountsReporter {
  constructor(globalConfig) {
    this.file = path.join(globalConfig.rootDir, '.roundhouse', 'test-counts.json');
    this.cpuFile = path.join(globalConfig.rootDir, '.roundhouse', 'test-cpu.jsonl');
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
    const counts = {
      passed: results.numPassedTests,
      failed: results.numFailedTests,
      skipped: results.numPendingTests + results.numTodoTests,
      failedSuites: results.numFailedTestSuites,
      runtimeErrorSuites: results.numRuntimeErrorTestSuites,
      success: results.success,
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
    const partial = `${this.file}.${process.pid}`;
    fs.writeFileSync(partial, JSON.stringify(counts));
    fs.renameSync(partial, this.file);
  }
}

module.exports = CountsReporter;

// Runs the longest test files first, so that on 2 cores no worker sits idle while the other finishes a long file
// at the end of the run. Jest's own sequencer orders by the durations in its cache (/tmp/jest_*), and a machine
// without that cache (a fresh CI host) by file size, which puts some of the longest files (the soak, the recovery
// and example campaigns: short files) last; test/durations.json, the durations of a full run (written by
// test/reporters/counts-reporter.js to .roundhouse/test-durations.json), stands in for the cache there.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const Sequencer = require('@jest/test-sequencer').default;

const root = path.join(__dirname, '..');
const recorded = JSON.parse(fs.readFileSync(path.join(__dirname, 'durations.json'), 'utf8')).seconds;

class LongestFirstSequencer extends Sequencer {
  /** The cache's duration (ms) of a file that ran here before, else the recorded one. */
  time(test) {
    const cached = super.time(test);
    if (cached !== undefined && cached !== null) return cached;
    const seconds = recorded[path.relative(root, test.path)];
    return seconds === undefined ? undefined : seconds * 1000;
  }
}

module.exports = LongestFirstSequencer;

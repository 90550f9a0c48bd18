#!/usr/bin/env node
'use strict';
// The end of .ci/run: from jest's counts (test/reporters/counts-reporter.js) and `npm test`'s exit status, prints the
// slowest test files, the skipped tests test/skip-allowlist.json does not allow, and last the closing line
// `N passed, N failed, N skipped`; exits non-zero when CI failed.
// A skip the allow-list does not name counts as failed, not skipped: each test is in exactly one of the three.
// pytest's counts (scripts/python-tests.js) are added in the same way, when that file is given and exists.
// Usage: node scripts/ci-summary.js <test-counts.json> <npm test's exit status> [<pytest-counts.json>]
const fs = require('node:fs');

/** The closing line's numbers and what else to print, from the counts file's contents (undefined: jest never reported). */
function summarize(counts, status) {
  if (!counts) return { passed: 0, failed: 1, skipped: 0, notAllowed: [], slowest: [] }; // the checks or jest's setup failed first
  const notAllowed = (counts.skips ?? []).filter((s) => s.allowedBecause === null);
  let failed = counts.failed + counts.runtimeErrorSuites + notAllowed.length;
  if (status !== 0 && failed === 0) failed = 1;
  return { passed: counts.passed, failed, skipped: counts.skipped - notAllowed.length, notAllowed, slowest: counts.slowest ?? [] };
}

function readCounts(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Jest's counts with pytest's added (pytest's skips are held to the same allow-list: none is allowed today). */
function merged(jest, pytest) {
  if (!jest || !pytest) return jest;
  const allowed = readCounts(require('node:path').join(__dirname, '..', 'test', 'skip-allowlist.json'))?.allowed ?? {};
  const skips = (pytest.skips ?? []).map((s) => ({ ...s, allowedBecause: allowed[`${s.file}::${s.name}`] ?? null }));
  return {
    ...jest,
    passed: jest.passed + pytest.passed,
    failed: jest.failed + pytest.failed,
    skipped: jest.skipped + pytest.skipped,
    skips: [...(jest.skips ?? []), ...skips],
  };
}

const [file, statusArg, pytestFile] = process.argv.slice(2);
const status = Number(statusArg);
const s = summarize(merged(readCounts(file), pytestFile ? readCounts(pytestFile) : undefined), status);
if (s.slowest.length) {
  console.log('== slowest test files');
  for (const t of s.slowest)
    console.log(`   ${String(t.seconds).padStart(6)} s  ${String(t.cpuSeconds ?? '?').padStart(6)} s CPU  ${t.file}`);
}
if (s.notAllowed.length) {
  console.log(`== ${s.notAllowed.length} skipped test(s) not on test/skip-allowlist.json (run them, or allow them there with why):`);
  for (const t of s.notAllowed) console.log(`   ${t.file}: ${t.name} (${t.status})`);
}
console.log(`${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`);
process.exitCode = status === 0 && s.failed === 0 ? 0 : 1;

/** One Temporal dev server for the whole run (test/global-setup.ts); test files run in parallel. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': 'ts-jest' },
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  setupFiles: ['<rootDir>/test/setup-runtime.ts'],
  setupFilesAfterEnv: ['<rootDir>/test/cpu-usage.ts'],
  // Generous: a 2-core machine under load runs the heaviest round tests at a third of their quiet speed.
  testTimeout: 300000,
  // Three on two cores: the round and crash tests mostly wait (on emulated latency, heartbeat timeouts, kills, Python
  // workers), so a third file fills the idle CPU. Whole suite, this machine, fresh clone: 2 workers 1,110 s of jest,
  // 3 workers 909-918 s, 4 workers 903 s (2026-12-08: the CPU is the bound by then; docs/testing.md).
  maxWorkers: 3,
  // The longest files first (the recorded durations where jest has none cached): no worker idles at the end.
  testSequencer: '<rootDir>/test/sequencer.js',
  reporters: ['default', '<rootDir>/test/reporters/counts-reporter.js'],
};

/** The defaults of a call to the user's function on a Python worker (the spec's schema and the calls share them). */
export const PYTHON_CALL_DEFAULTS = {
  retry: { maxAttempts: 5, initialIntervalSeconds: 1, maxIntervalSeconds: 60, backoff: 2 },
  timeoutSeconds: 600,
  heartbeatTimeoutSeconds: 30,
  workerWaitSeconds: 120,
  concurrency: 8,
} as const;

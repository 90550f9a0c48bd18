import { DefaultLogger, Runtime } from '@temporalio/worker';

// Keep test output readable: the SDK's own lines only from WARN up (ROUNDHOUSE_TEST_SDK_LOG=DEBUG to see more).
const level = (process.env.ROUNDHOUSE_TEST_SDK_LOG ?? 'WARN') as 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';
try {
  Runtime.install({ logger: new DefaultLogger(level) });
} catch {
  /* already installed in this worker process */
}

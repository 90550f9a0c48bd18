import { Runtime, type Logger as TemporalLogger, type LogLevel, type LogMetadata } from '@temporalio/worker';
import type { Logger } from '../config/io/logging';
import { GPU_MINUTES_BUCKETS, METRICS } from '../activities/metrics';

/**
 * Sends the Temporal SDK's own log lines (worker, activities, workflows) through our redacting pino logger and, with
 * a metrics address, serves Prometheus metrics at http://<address>/metrics: Temporal's worker metrics (prefixed
 * `temporal_`) and Roundhouse's own (`roundhouse_*`, recorded by the activities on the same meter).
 */
export function installRuntimeLogger(logger: Logger, options: { metricsAddress?: string } = {}): void {
  const forward = (level: LogLevel, message: string, meta?: LogMetadata) => {
    const pinoLevel =
      level === 'TRACE' ? 'trace' : level === 'DEBUG' ? 'debug' : level === 'INFO' ? 'info' : level === 'WARN' ? 'warn' : 'error';
    logger[pinoLevel]({ ...meta }, message);
  };
  const temporalLogger: TemporalLogger = {
    log: forward,
    trace: (m, meta) => forward('TRACE', m, meta),
    debug: (m, meta) => forward('DEBUG', m, meta),
    info: (m, meta) => forward('INFO', m, meta),
    warn: (m, meta) => forward('WARN', m, meta),
    error: (m, meta) => forward('ERROR', m, meta),
  };
  const metrics = options.metricsAddress
    ? { prometheus: { bindAddress: options.metricsAddress, histogramBucketOverrides: { [METRICS.roundGpuMinutes]: GPU_MINUTES_BUCKETS } } }
    : undefined;
  Runtime.install({ logger: temporalLogger, ...(metrics ? { telemetryOptions: { metrics } } : {}) });
}

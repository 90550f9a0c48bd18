import { Runtime, type Logger as TemporalLogger, type LogLevel, type LogMetadata } from '@temporalio/worker';
import type { Logger } from '../config/logging';

/** Sends the Temporal SDK's own log lines (worker, activities, workflows) through our redacting pino logger. */
export function installRuntimeLogger(logger: Logger): void {
  const forward = (level: LogLevel, message: string, meta?: LogMetadata) => {
    const pinoLevel = level === 'TRACE' ? 'trace' : level === 'DEBUG' ? 'debug' : level === 'INFO' ? 'info' : level === 'WARN' ? 'warn' : 'error';
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
  Runtime.install({ logger: temporalLogger });
}

import { loadWorkerSettings, type WorkerSettings } from '../config/worker-env';
import { createLogger, registerSecret, type Logger } from '../config/logging';
import { installRuntimeLogger } from '../workers/runtime';

export interface CliContext {
  settings: WorkerSettings;
  logger: Logger;
}

let installed = false;

/** Validates the environment first (a bad variable is a ConfigError → exit 2), then sets up logging. */
export function cliContext(): CliContext {
  const settings = loadWorkerSettings();
  registerSecret(settings.apiKey);
  const logger = createLogger({ level: settings.logLevel });
  if (!installed) {
    installRuntimeLogger(logger.child({ component: 'temporal' }));
    installed = true;
  }
  return { settings, logger };
}

import { Command, CommanderError } from 'commander';
import { ConfigError, DataValidationError } from '../config/rules/errors';
import { CliFailure } from './failure';
import { modules } from './modules';
import { upCommand } from './up';
import { workerCommand } from './worker';
import { demoCommand } from './demo';
import { emulatorCommand } from './emulator';
import { codecServerCommand } from './codec-server';
import {
  approveCommand,
  pauseCommand,
  rejectCommand,
  resumeCommand,
  runCommand,
  statusCommand,
  stopCommand,
  watchCommand,
} from './campaign';
import { scheduleCommand } from './schedule';
import { reapCommand } from './reap';
import { reportCommand } from './report';
import { checkpointsCommand } from './checkpoints';

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

export function buildProgram(): Command {
  const program = new Command('roundhouse')
    .description('Durable LLM post-training campaigns on Temporal')
    .showHelpAfterError()
    .exitOverride();
  program.addCommand(upCommand());
  program.addCommand(workerCommand());
  program.addCommand(demoCommand());
  program.addCommand(emulatorCommand());
  program.addCommand(codecServerCommand());
  for (const command of [
    runCommand(),
    statusCommand(),
    watchCommand(),
    pauseCommand(),
    resumeCommand(),
    stopCommand(),
    approveCommand(),
    rejectCommand(),
    scheduleCommand(),
    reapCommand(),
    reportCommand(),
    checkpointsCommand(),
  ]) {
    program.addCommand(command);
  }
  // Subcommands do not inherit these: usage errors must reach main() as exceptions (exit code 2), not process.exit.
  const all = (c: Command): Command[] => [c, ...c.commands.flatMap(all)];
  for (const command of all(program)) command.exitOverride().showHelpAfterError();
  return program;
}

/**
 * Runs the command line; resolves to the process exit code (0 ok, 1 failed, 2 usage or input error), which the
 * caller sets as the process's. An action reports an unsuccessful outcome (a failed, cancelled, terminated or timed
 * out campaign) by throwing a CliFailure, never through process.exitCode: that would be overwritten.
 */
export async function main(argv: string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return EXIT_OK;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    if (err instanceof DataValidationError) {
      process.stderr.write(`roundhouse: ${modules.logging().redactText(err.message)}\n`);
      return EXIT_USAGE;
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`roundhouse: ${modules.logging().redactText(err.message)}\n`);
      return EXIT_USAGE;
    }
    if (err instanceof CliFailure) {
      process.stderr.write(`roundhouse: ${modules.logging().redactText(err.message)}\n`);
      return EXIT_FAILED;
    }
    modules
      .logging()
      .createLogger({ name: 'roundhouse', destination: process.stderr, format: modules.workerEnv().logFormatOf() })
      .error({ err }, 'command failed');
    return EXIT_FAILED;
  }
}

/** A command failed for a reason that is not the user's input (exit code 1, one line, no stack). */
export class CliFailure extends Error {
  readonly code = 'CLI_FAILURE';
}

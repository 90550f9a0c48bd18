/** Bad configuration or input: reported as one line naming where the problem is, exit code 2. */
export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
  /** Where the bad value came from: an environment variable, or `file:line field`. */
  readonly where: string;

  constructor(where: string, problem: string) {
    super(`${where}: ${problem}`);
    this.name = 'ConfigError';
    this.where = where;
  }
}

/** Bad training data, every problem listed by file, line and field: found before anything is provisioned, exit code 2. */
export class DataValidationError extends Error {
  readonly code = 'INVALID_DATA';
  constructor(readonly problems: string[]) {
    super(
      problems.length === 1
        ? problems[0]!
        : `${problems.length} problems in the data:\n  ${problems.slice(0, 20).join('\n  ')}${problems.length > 20 ? `\n  … and ${problems.length - 20} more` : ''}`,
    );
    this.name = 'DataValidationError';
  }
}

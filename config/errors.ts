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

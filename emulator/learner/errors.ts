/** The caller's input is invalid; no weights or pending gradients changed. */
export class LearnerInputError extends Error {
  readonly code = 'INVALID_INPUT';

  constructor(message: string) {
    super(message);
    this.name = 'LearnerInputError';
  }
}

/** The loss or its gradient came out NaN or infinite; that call accumulated no gradients. */
export class NonFiniteLossError extends Error {
  readonly code = 'NON_FINITE_LOSS';

  constructor(detail: string) {
    super(`${detail}; no gradients were accumulated`);
    this.name = 'NonFiniteLossError';
  }
}

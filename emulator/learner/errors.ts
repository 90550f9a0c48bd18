/** The caller's input cannot be trained on or sampled from; nothing in the learner changed. */
export class LearnerInputError extends Error {
  readonly code = 'INVALID_INPUT';

  constructor(message: string) {
    super(message);
    this.name = 'LearnerInputError';
  }
}

/** The loss came out NaN or infinite; the gradients of that call were discarded. */
export class NonFiniteLossError extends Error {
  readonly code = 'NON_FINITE_LOSS';

  constructor(readonly loss: number) {
    super(`loss is not finite (${loss}); the gradients of this call were discarded`);
    this.name = 'NonFiniteLossError';
  }
}

/** An error the emulator answers with an HTTP status and a JSON body `{"error": {"message", "code"}}`. */
export class EmulatorHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'EmulatorHttpError';
  }
}

export const badRequest = (message: string, code = 'INVALID_ARGUMENT') => new EmulatorHttpError(400, code, message);
export const notFound = (what: string, id: string) => new EmulatorHttpError(404, 'NOT_FOUND', `${what} ${id} not found`);
/** A 429 with the delay both ways the Stainless SDKs read it: `retry-after-ms` first, then `Retry-After` (whole seconds). */
export const tooManyRequests = (message: string, retryAfterMs = 1000) =>
  new EmulatorHttpError(429, 'RESOURCE_EXHAUSTED', message, {
    'retry-after-ms': String(retryAfterMs),
    'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
  });

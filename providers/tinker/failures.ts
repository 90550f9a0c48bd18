import { ProviderError, classifyOperationError } from '../errors';

/**
 * A Tinker operation's failure, however the server reports it: hosted Tinker answers the future with a 200 body
 * `{error, category}`; SkyRL's server with HTTP 400 `{"detail": <the engine's text>}` (500 when it cannot say). The
 * code comes from the text: a `CODE:` it starts with (`INTERNAL_ERROR: …`, as XLA's errors do too), or what SkyRL's
 * texts say (scripts/conformance/skyrl/FINDINGS.md §4); else from the category or status (the caller's input, or the
 * server's fault). The text is kept whole in the message.
 */
export function operationFailure(requestId: string, message: string, source: { category: string } | { status: number }): ProviderError {
  const fallback =
    'category' in source
      ? source.category === 'user'
        ? 'INVALID_INPUT'
        : 'INTERNAL_ERROR'
      : source.status >= 500
        ? 'INTERNAL_ERROR'
        : 'INVALID_INPUT';
  const code = codeOfText(message) ?? fallback;
  const how = 'category' in source ? source.category : `HTTP ${source.status}`;
  return new ProviderError(
    `OPERATION_FAILED_${code}`,
    classifyOperationError(code),
    `Tinker operation ${requestId} failed (${how}): ${message}`,
    {
      providerCode: code,
      operationId: requestId,
      ...('status' in source ? { status: source.status } : {}),
    },
  );
}

/** What SkyRL's failure texts mean, as operation error codes. */
const SKYRL_TEXTS: [RegExp, string][] = [
  [/^Maximum number of LoRA adapters/i, 'RESOURCE_EXHAUSTED'], // no adapter slot: capacity, not the caller's input
  [/^Model \S+ not loaded/i, 'SESSION_NOT_ACTIVE'], // unloaded, expired with its session, or the server restarted
  [/^LoRA rank .* must be between|^Rank mismatch/i, 'INVALID_INPUT'],
  [/^Checkpoint not found/i, 'NOT_FOUND'],
];

function codeOfText(message: string): string | undefined {
  const prefixed = /^([A-Z][A-Z_]+):/.exec(message)?.[1];
  if (prefixed) return prefixed;
  return SKYRL_TEXTS.find(([pattern]) => pattern.test(message))?.[1];
}

import { isRetryableStatus, ModelError } from '../model/errors';
import { errorMessage } from '../internal/errorMessage';

interface SdkErrorClasses {
  APIError?: abstract new (...args: never[]) => Error;
  OpenAIError?: abstract new (...args: never[]) => Error;
}

/**
 * Maps whatever the SDK threw to a {@link ModelError} (for `openAIChat` and `openAIResponses`).
 * `connected`: the response had begun. The SDK's error classes are read from the
 * client's constructor (`OpenAI.APIError`…), so this module never loads `openai` itself (an
 * optional peer dependency) and works with whichever copy the user's client comes from.
 */
export function toModelError(error: unknown, client: object, connected: boolean): ModelError {
  if (error instanceof ModelError) return error;
  const sdk = (client as { constructor?: SdkErrorClasses }).constructor ?? {};
  const message = errorMessage(error);
  const isApiError =
    (typeof sdk.APIError === 'function' && error instanceof sdk.APIError) ||
    (error instanceof Error && typeof (error as { status?: unknown }).status === 'number');
  if (isApiError) {
    const { status, headers } = error as { status?: unknown; headers?: unknown };
    const { type, code } = error as { type?: unknown; code?: unknown };
    if (typeof status === 'number') {
      return new ModelError(message, {
        status,
        // A 429 for an exhausted quota (billing) is not a rate limit: waiting does not help.
        retryable: isRetryableStatus(status) && !isQuotaError(type, code),
        retryAfterMs: retryAfterMs(headers),
        cause: error,
      });
    }
    // No status: connection error, connection timeout, or an error event inside the stream, whose
    // type says whether the same request can succeed (not a bad request, a bad key, a refused model).
    return new ModelError(message, { retryable: isRetryableStreamError(type, code), cause: error });
  }
  if (typeof sdk.OpenAIError === 'function' && error instanceof sdk.OpenAIError) {
    return new ModelError(message, { retryable: false, cause: error }); // misuse of the SDK
  }
  if (error instanceof SyntaxError) {
    return new ModelError(`Malformed model stream: ${message}`, { retryable: false, cause: error });
  }
  if (!connected) {
    // Before any chunk, the SDK reports a failed connection as an APIError (above): anything else
    // is a request it could not build or send (a BigInt in the settings…), the same on a retry.
    return new ModelError(`Model request failed: ${message}`, { retryable: false, cause: error });
  }
  // A stream cut mid-way (undici's `TypeError: terminated`, ECONNRESET…).
  return new ModelError(`Model connection failed: ${message}`, { retryable: true, cause: error });
}

/** Whether the same request can succeed after an error without a status (an error event inside the stream, a lost connection), by the error's type and code. */
export function isRetryableStreamError(type: unknown, code: unknown): boolean {
  return !(typeof type === 'string' && NOT_RETRYABLE_TYPES.has(type)) && !isQuotaError(type, code);
}

/** Error types of an error event inside the stream that the same request will meet again. */
const NOT_RETRYABLE_TYPES = new Set(['invalid_request_error', 'authentication_error', 'permission_error', 'not_found_error']);

/** The account's quota is spent (billing), by the error's type or code: no retry helps. */
function isQuotaError(type: unknown, code: unknown): boolean {
  return type === 'insufficient_quota' || code === 'insufficient_quota';
}

/** Reads `retry-after-ms`, else `retry-after` (seconds or an HTTP date), in milliseconds. */
function retryAfterMs(headers: unknown): number | undefined {
  const ms = parseFloat(headerValue(headers, 'retry-after-ms') ?? '');
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const after = headerValue(headers, 'retry-after');
  if (after === undefined || after.trim() === '') return undefined;
  const seconds = Number(after);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds * 1000 : undefined;
  const date = Date.parse(after);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function headerValue(headers: unknown, name: string): string | undefined {
  if (!headers || typeof headers !== 'object') return undefined;
  const get = (headers as { get?: unknown }).get;
  if (typeof get === 'function') return (get.call(headers, name) as string | null) ?? undefined;
  const value = (headers as Record<string, unknown>)[name];
  return typeof value === 'string' ? value : undefined;
}

/** Options of a {@link ModelError}. */
export interface ModelErrorOptions {
  status?: number;
  retryable?: boolean;
  retryAfterMs?: number;
  cause?: unknown;
}

/**
 * A failed model call. `retryable` tells retry policies whether another attempt may succeed
 * (rate limits, server errors, timeouts, dropped connections); `retryAfterMs` is the server's
 * own advice when it gave one.
 *
 * @example
 * throw new ModelError('Rate limited', { status: 429, retryable: true, retryAfterMs: 2000 });
 */
export class ModelError extends Error {
  override readonly name: string = 'ModelError';
  readonly status?: number;
  readonly retryable: boolean;
  readonly retryAfterMs?: number;

  constructor(message: string, options: ModelErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status;
    this.retryable = options.retryable ?? (options.status === undefined || isRetryableStatus(options.status));
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * A model call that took too long: no first token, too long between tokens, or too long in all.
 * Retryable, so a retry policy outside the timeout tries again.
 *
 * @example
 * new ModelTimeoutError('No first token within 30000 ms', 'first-token');
 */
export class ModelTimeoutError extends ModelError {
  override readonly name = 'ModelTimeoutError';
  constructor(
    message: string,
    readonly kind: 'first-token' | 'idle' | 'total',
  ) {
    super(message, { retryable: true });
  }
}

/** 408, 409, 429 and 5xx are worth another attempt; other statuses are not. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

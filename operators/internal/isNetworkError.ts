const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'ENETUNREACH',
  'ENETDOWN',
  'EHOSTUNREACH',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
]);
const NETWORK_NAMES = new Set(['APIConnectionError', 'APIConnectionTimeoutError', 'FetchError']);

/**
 * True for a failed connection rather than an answer: a socket error code (ECONNRESET…, undici's
 * UND_ERR_*), the SDK's connection errors, or fetch's `TypeError: fetch failed` / `terminated`,
 * looked for along the `cause` chain. An HTTP status (a 400…) is never a network error.
 */
export function isNetworkError(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const { code, name, message, status } = e as { code?: unknown; name?: unknown; message?: unknown; status?: unknown };
    if (typeof status === 'number') return false;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    if (typeof name === 'string' && NETWORK_NAMES.has(name)) return true;
    if (e instanceof TypeError && typeof message === 'string' && /^(fetch failed|terminated)$|network/i.test(message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

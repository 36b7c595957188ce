/**
 * Does nothing: the handler that marks a promise's rejection as seen (`p.then(noop, noop)`).
 *
 * @example
 * save().then(noop, noop); // nobody waits for it, and a failure is not an unhandled rejection
 */
export function noop(): void {}

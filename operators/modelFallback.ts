import { catchError, throwError, type Observable } from 'rxjs';
import { toErrorInfo, type AgentMiddleware, type ModelCallContext, type ModelClient, type ModelUpdate } from '../src/index';

/**
 * Falls back to other models when a model call fails: the same request goes to each fallback in
 * order (through the wrappers registered after this one, via `ctx.call(ctx.request, client)`)
 * until one succeeds. Each switch emits `model-fallback { from, to, error }` with positions
 * (0 = the agent's model, 1 = the first fallback…) and the failed stream's partial text is
 * dropped from the turn's text and messages. When every model fails, the last error is raised.
 *
 * Takes the fallback clients, at least one; no options. Register `modelRetry` after it (inner) to
 * retry each model before falling back, or before it (outer) to retry the whole sequence.
 *
 * @example
 * const agent = createAgent({
 *   model: openAIChat({ client: openai, model: 'gpt-4o' }),
 *   middleware: [modelFallback(openAIChat({ client: openai, model: 'gpt-4o-mini' }), localModel)],
 * });
 */
export function modelFallback(...clients: ModelClient[]): AgentMiddleware {
  if (clients.length === 0) {
    throw new TypeError('modelFallback: clients must hold at least one fallback ModelClient');
  }
  clients.forEach((client, index) => {
    if (typeof client !== 'function') {
      // An object may be options passed by mistake (`modelFallback(backup, { maxRetries: 1 })`):
      // name its keys, as the other operators name an unknown option.
      const keys = typeof client === 'object' && client !== null && !Array.isArray(client) ? Object.keys(client) : [];
      const got = keys.length > 0 ? `an object with ${keys.map((key) => `'${key}'`).join(', ')} (modelFallback takes no options)` : typeof client;
      throw new TypeError(`modelFallback: clients[${index}] must be a ModelClient (a function), got ${got}`);
    }
  });
  const fallbacks: readonly ModelClient[] = [...clients];

  return {
    name: 'modelFallback',
    wrapModel: (ctx) => (source) => source.pipe(catchError((error: unknown) => fallBack(ctx, fallbacks, 1, error))),
  };
}

/** Switches to fallback `to` (1-based position) after `error`, and on to the next when it fails. */
function fallBack(ctx: ModelCallContext, fallbacks: readonly ModelClient[], to: number, error: unknown): Observable<ModelUpdate> {
  // No fallback left: the last error.
  if (to > fallbacks.length) return throwError(() => error);
  ctx.emit({ type: 'model-fallback', from: to - 1, to, error: toErrorInfo(error) });
  return ctx.call(ctx.request, fallbacks[to - 1]).pipe(catchError((next: unknown) => fallBack(ctx, fallbacks, to + 1, next)));
}

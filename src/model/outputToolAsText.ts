import { Observable } from 'rxjs';
import type { ModelUpdate } from './types';

/**
 * For an adapter that asks for structured output as a tool the model must call (its API has no
 * JSON Schema response format): the updates of the call to tool `name` become the answer's text
 * (its arguments, as they stream, are `text-delta`s), so that the run reads the call as the final
 * answer, not as a call to run. A `tool-calls` finish becomes `stop` when that call was the only one.
 *
 * @example
 * client(request).pipe((updates$) => outputToolAsText(updates$, 'final_answer'));
 */
export function outputToolAsText(updates$: Observable<ModelUpdate>, name: string): Observable<ModelUpdate> {
  return new Observable<ModelUpdate>((subscriber) => {
    /** The index of the output tool's call, once named; whether any other call was seen. */
    let index = -1;
    let otherCalls = false;
    return updates$.subscribe({
      next(update) {
        if (update.type === 'tool-call-delta') {
          if (update.name === name || (update.index === index && update.name === undefined)) {
            index = update.index;
            if (update.argsDelta !== '') subscriber.next({ type: 'text-delta', text: update.argsDelta });
            return;
          }
          otherCalls = true;
        } else if (update.type === 'finish' && update.reason === 'tool-calls' && index !== -1 && !otherCalls) {
          subscriber.next(update.model === undefined ? { type: 'finish', reason: 'stop' } : { type: 'finish', reason: 'stop', model: update.model });
          return;
        }
        subscriber.next(update);
      },
      error: (error: unknown) => subscriber.error(error),
      complete: () => subscriber.complete(),
    });
  });
}

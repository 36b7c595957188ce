// What a model stream emitted, or the error it failed with, for the adapters' specs.
import { lastValueFrom, toArray, type Observable } from 'rxjs';
import type { ModelError } from '../../src/model/errors';

/** Every value of `values$`, once it completes. */
export const collect = <T>(values$: Observable<T>): Promise<T[]> => lastValueFrom(values$.pipe(toArray()));

/** The error `values$` fails with (a spec failure when it completes instead). */
export async function errorOf(values$: Observable<unknown>): Promise<ModelError> {
  try {
    await collect(values$);
  } catch (error) {
    return error as ModelError;
  }
  throw new Error('expected the stream to fail');
}

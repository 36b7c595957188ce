/**
 * A streaming chat page, bundled for the browser by browser.spec.ts: the client of docs/guide/streaming-to-a-ui.md, with the
 * package's built ESM. "Send" posts the message and shows the run's events as they arrive; "Stop"
 * unsubscribes, which aborts the request (before or after its response came).
 */
import { ofType } from 'rx-agent';
import { decodeSSE } from 'rx-agent/http';
import { defer, finalize, from, share, switchMap, throwError, type Subscription } from 'rxjs';
import { eventLabel as label } from 'rx-agent/testing';

const $ = (id: string) => document.getElementById(id) as HTMLElement;
let subscription: Subscription | undefined;

$('send').addEventListener('click', () => {
  $('status').textContent = 'streaming';
  const body = JSON.stringify({ message: ($('message') as HTMLInputElement).value });
  const events$ = defer(() => {
    const abort = new AbortController();
    return from(fetch('/api/chat', { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: abort.signal })).pipe(
      switchMap((res) => (res.ok ? decodeSSE(res.body!) : throwError(() => new Error(`chat failed: ${res.status}`)))),
      finalize(() => abort.abort()),
    );
  }).pipe(share());
  subscription = events$.subscribe({
    next: (event) => {
      const item = document.createElement('li');
      item.textContent = label(event);
      $('events').append(item);
    },
    error: (error: unknown) => ($('status').textContent = `error: ${String(error)}`),
    complete: () => ($('status').textContent = 'done'),
  });
  subscription.add(events$.pipe(ofType('text-delta')).subscribe((event) => $('output').append(event.text)));
});

$('stop').addEventListener('click', () => {
  subscription?.unsubscribe();
  $('status').textContent = 'stopped';
});

/**
 * A chat page whose runs ask before a tool runs, bundled for the browser by browser.spec.ts: the
 * "Approvals over HTTP" client of docs/guide/streaming-to-a-ui.md. The run's events come over SSE; a `permission-request`
 * shows Allow / Deny buttons, whose answer goes back with a POST to /api/respond.
 */
import { type AgentEvent } from 'rx-agent';
import { decodeSSE } from 'rx-agent/http';
import { eventLabel as label } from 'rx-agent/testing';

const $ = (id: string) => document.getElementById(id) as HTMLElement;

function show(event: AgentEvent): void {
  const item = document.createElement('li');
  item.textContent = label(event);
  $('events').append(item);
  if (event.type === 'text-delta') $('output').append(event.text);
  if (event.type === 'permission-request') {
    const answer = (approved: boolean) => async () => {
      $('question').replaceChildren();
      const res = await fetch('/api/respond', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ runId: event.runId, response: { type: 'permission-response', requestId: event.requestId, approved } }),
      });
      $('answers').append(`${res.status} `);
    };
    const allow = Object.assign(document.createElement('button'), { id: 'allow', textContent: `Allow ${event.toolName}` });
    const deny = Object.assign(document.createElement('button'), { id: 'deny', textContent: 'Deny' });
    allow.onclick = answer(true);
    deny.onclick = answer(false);
    $('question').replaceChildren(allow, deny);
  }
}

$('send').addEventListener('click', () => void send());

async function send(): Promise<void> {
  $('status').textContent = 'streaming';
  const res = await fetch('/api/chat', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message: ($('message') as HTMLInputElement).value }),
  });
  if (!res.ok) {
    $('status').textContent = `error: ${res.status}`;
    return;
  }
  decodeSSE(res.body!).subscribe({
    next: show,
    error: (error: unknown) => ($('status').textContent = `error: ${String(error)}`),
    complete: () => ($('status').textContent = 'done'),
  });
}

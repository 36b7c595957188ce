/**
 * The web demo's page: a chat over `runsHandler`, with `runsClient` from rx-agent/http (fetch and
 * a ReadableStream; no EventSource, no framework). The tab's conversation (its session id, and
 * each turn's text and run id) is kept in sessionStorage: a reload replays the turns and follows a
 * run still going from where the server has it.
 */
import { runsClient, RunsHttpError } from 'rx-agent/http';
import type { AgentEvent } from 'rx-agent';

interface Turn {
  readonly runId: string;
  readonly text: string;
}
interface Saved {
  readonly sessionId: string;
  readonly turns: Turn[];
}

const runs = runsClient('/api/runs');
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const log = $('log');
const form = $<HTMLFormElement>('chat');
const input = $<HTMLInputElement>('message');
const send = $<HTMLButtonElement>('send');
const stop = $<HTMLButtonElement>('stop');

const saved: Saved = load();
let live: string | undefined;

function load(): Saved {
  try {
    const value = JSON.parse(sessionStorage.getItem('rx-agent-demo') ?? '') as Saved;
    if (typeof value.sessionId === 'string' && Array.isArray(value.turns)) return value;
  } catch {
    // nothing saved yet
  }
  return { sessionId: crypto.randomUUID(), turns: [] };
}

const save = () => sessionStorage.setItem('rx-agent-demo', JSON.stringify(saved));

function element(tag: string, className: string, text = ''): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

/** The page's state, for people (the buttons) and for the browser spec (`data-state`). */
function setState(state: 'idle' | 'streaming'): void {
  document.body.dataset.state = state;
  send.disabled = state !== 'idle';
  stop.disabled = state === 'idle';
}

/** Renders a turn: the user's text, then the run's events as they come. */
function follow(turn: Turn, last: boolean): void {
  const box = element('section', 'turn');
  box.dataset.runId = turn.runId;
  box.append(element('div', 'user', turn.text));
  log.append(box);
  if (last) {
    live = turn.runId;
    setState('streaming');
  }
  let bubble: HTMLElement | undefined;
  let waiting: HTMLElement | undefined;
  const cards = new Map<string, { card: HTMLElement; args: HTMLElement }>();
  const status = (text: string) => box.append(element('div', 'status', text));
  const card = (callId: string, name: string) => {
    let found = cards.get(callId);
    if (!found) {
      const node = element('div', 'tool');
      const args = element('span', 'args');
      node.append(element('span', 'name', `${name}(`), args, ')');
      box.append(node);
      found = { card: node, args };
      cards.set(callId, found);
      bubble = undefined; // text after a call is a new bubble
    }
    return found;
  };
  const show = (event: AgentEvent) => {
    waiting?.remove(); // the run went on after its suspension
    waiting = undefined;
    switch (event.type) {
      case 'text-delta':
        if (!bubble) box.append((bubble = element('div', 'agent')));
        bubble.append(event.text);
        break;
      case 'tool-input-start':
        card(event.callId, event.name);
        break;
      case 'tool-input-delta':
        card(event.callId, event.name).args.append(event.argsDelta);
        break;
      case 'tool-call':
        card(event.callId, event.name).args.textContent = JSON.stringify(event.args);
        break;
      case 'permission-request':
        ask(card(event.callId, event.toolName).card, turn.runId, event.requestId, event.toolName);
        break;
      case 'tool-result': {
        const { card: node } = card(event.callId, event.name);
        node.querySelector('.ask')?.remove();
        const result = event.denied ? `denied: ${event.reason ?? ''}` : typeof event.result === 'string' ? event.result : JSON.stringify(event.result);
        node.append(element('div', event.isError ? 'result error' : 'result', `→ ${result}`));
        break;
      }
      case 'error':
        status(`error (${event.source}): ${event.error.message}`);
        break;
      case 'run-end':
        if (event.reason === 'suspended') {
          box.append((waiting = element('div', 'status', 'waiting for your answer…')));
          break;
        }
        box.querySelectorAll('.ask').forEach((open) => open.remove()); // unanswered: expired with the run
        if (event.reason !== 'completed') status(event.reason === 'cancelled' ? 'stopped' : `ended: ${event.reason}`);
        break;
    }
  };
  runs.events(turn.runId).subscribe({
    next: show,
    error: (error: unknown) => {
      status(error instanceof RunsHttpError && error.status === 404 ? 'this run is no longer kept by the server' : `lost the run: ${String(error)}`);
      if (live === turn.runId) done();
    },
    complete: () => {
      if (live === turn.runId) done();
    },
  });
}

function done(): void {
  live = undefined;
  setState('idle');
  input.focus();
}

function ask(card: HTMLElement, runId: string, requestId: string, toolName: string): void {
  if (card.querySelector('.ask')) return;
  const row = element('div', 'ask', `Allow ${toolName}?`);
  const answer = (approved: boolean) => {
    row.querySelectorAll('button').forEach((button) => (button.disabled = true));
    const response = { type: 'permission-response' as const, requestId, approved, ...(approved ? {} : { reason: 'declined on the web page' }) };
    runs.respond(runId, response).catch((error: unknown) => row.append(` (${String(error)})`));
  };
  const approve = element('button', 'approve', 'Approve');
  const deny = element('button', 'deny', 'Deny');
  approve.addEventListener('click', () => answer(true));
  deny.addEventListener('click', () => answer(false));
  row.append(approve, deny);
  card.append(row);
}

form.addEventListener('submit', (submit) => {
  submit.preventDefault();
  const text = input.value.trim();
  if (!text || live) return;
  input.value = '';
  setState('streaming');
  runs.start({ input: text, sessionId: saved.sessionId }).then(
    (runId) => {
      const turn = { runId, text };
      saved.turns.push(turn);
      save();
      follow(turn, true);
    },
    (error: unknown) => {
      log.append(element('div', 'status', `could not start: ${String(error)}`));
      setState('idle');
    },
  );
});

stop.addEventListener('click', () => {
  if (live) void runs.cancel(live);
});

setState('idle');
saved.turns.forEach((turn, i) => follow(turn, i === saved.turns.length - 1));

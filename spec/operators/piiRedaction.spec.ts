import { Observable, Subject, config, merge, of, queueScheduler, retry, takeUntil, takeWhile, tap } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineTool,
  textMessage,
  type AgentEvent,
  type AgentMiddleware,
  type Message,
  type ModelCallContext,
  type ModelRequest,
  type ModelUpdate,
  type RunHandle,
  type Tool,
  ModelError,
} from '../../src/index';
import { collectEvents, eventLabel, eventsOfType, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { PiiDetectedError, piiRedaction, type PiiRedactionOptions } from '../../operators/piiRedaction';
import { modelRetry } from '../../operators/modelRetry';
import { textLike } from '../support/textLike';

function collect(events$: Observable<AgentEvent>): AgentEvent[] {
  const events: AgentEvent[] = [];
  let done = false;
  events$.subscribe({ next: (e) => events.push(e), complete: () => (done = true) });
  expect(done).toBe(true);
  return events;
}
type Of<T extends AgentEvent['type']> = Extract<AgentEvent, { type: T }>;
const ofType = <T extends AgentEvent['type']>(events: AgentEvent[], type: T) => events.filter((e): e is Of<T> => e.type === type);
const runEnd = (events: AgentEvent[]) => events.at(-1) as Of<'run-end'>;
const deltas = (events: AgentEvent[]) => ofType(events, 'text-delta').map((e) => e.text);
const textOfMessage = (m: Message) => m.content.map((p) => (p.type === 'text' ? p.text : `<${p.type}>`)).join('|');
const detected = (piiType: string, strategy: string, count: number, runId = 'r') => ({ type: 'pii-detected', runId, piiType, strategy, count });

/** One run of a fresh agent; returns the events, the model and the session. */
function run(turns: ScriptedTurn[], options: PiiRedactionOptions | undefined, input: string | Message[] = 'hi', extra: { tools?: Tool[] } = {}) {
  const model = scriptedModel(turns);
  const session = createSession();
  const agent = createAgent({ model, tools: extra.tools, middleware: [piiRedaction(options)] });
  const events = collect(agent.run(input, { runId: 'r', session }));
  return { events, model, session };
}

/** The operator's wrapModel alone over a list of updates (synchronous). */
function wrapOnly(options: PiiRedactionOptions, updates: ModelUpdate[]) {
  const emitted: unknown[] = [];
  const ctx = { iteration: 0, emit: (e: unknown) => emitted.push(e) } as unknown as ModelCallContext;
  const out: ModelUpdate[] = [];
  let error: unknown;
  of(...updates)
    .pipe(piiRedaction(options).wrapModel!(ctx))
    .subscribe({ next: (u) => out.push(u), error: (e) => (error = e) });
  return { out, emitted, error };
}

const EMAIL = 'john@example.com';
/** Rules that turn every built-in type off (only custom detectors remain). */
const NONE = { email: false, creditCard: false, ssn: false, phone: false, ip: false, mac: false, url: false, apiKey: false } as const;
const CARD = '4111 1111 1111 1111';
const IP_HASH = '<ip_hash:f5047344>'; // sha256('10.0.0.1'), first 8 hex

describe('piiRedaction', () => {
  it('checks its options at construction', () => {
    expect(() => piiRedaction(null as unknown as PiiRedactionOptions)).toThrow(new TypeError('piiRedaction: options must be an object, got null'));
    expect(() => piiRedaction({ applyToInput: 'yes' as unknown as boolean })).toThrow(new TypeError('piiRedaction: applyToInput must be a boolean, got "yes"'));
    expect(() => piiRedaction({ applyToOutput: 1 as unknown as boolean })).toThrow(new TypeError('piiRedaction: applyToOutput must be a boolean, got 1'));
    expect(() => piiRedaction({ applyToToolResults: null as unknown as boolean })).toThrow(
      new TypeError('piiRedaction: applyToToolResults must be a boolean, got null'),
    );
    expect(() => piiRedaction({ rules: { passport: 'redact' } as never })).toThrow(TypeError);
    expect(() => piiRedaction({ rules: { email: 'shred' as never } })).toThrow(/Unknown strategy "shred"/);
    expect(() => piiRedaction({ custom: [{ name: 'email', detector: /x/ }] })).toThrow(/name of a built-in type/);
    expect(() => piiRedaction({ custom: [{ name: 'x', detector: 'x' as never }] })).toThrow(TypeError);
    // A misspelt `strategy` would have fallen back to 'redact' in silence.
    expect(() => piiRedaction({ custom: [{ name: 'x', detector: /x/ }, { name: 'y', detector: /y/, stratgy: 'block' } as never] })).toThrow(
      new TypeError("piiRedaction: unknown option(s) 'custom[1].stratgy' (known: custom[1].name, custom[1].detector, custom[1].strategy)"),
    );
    expect(() => piiRedaction()).not.toThrow();
  });

  it('defaults: input redacted, output and tool results untouched', () => {
    const lookup = defineTool({ name: 'lookup', description: 'l', parameters: z.object({}), execute: () => `owner ${EMAIL}` });
    const { events, model, session } = run(
      [{ toolCalls: [{ name: 'lookup', args: {}, callId: 'c1' }] }, `Write to ${EMAIL}`],
      undefined,
      `mail ${EMAIL} please`,
      { tools: [lookup] },
    );
    expect(model.requests[0].messages).toEqual([textLike('user', 'mail [REDACTED_EMAIL] please')]);
    expect(session.messages[0]).toEqual(textLike('user', 'mail [REDACTED_EMAIL] please'));
    const toolMessage = model.requests[1].messages[2];
    expect(toolMessage.content[0]).toMatchObject({ type: 'tool-result', result: `owner ${EMAIL}` });
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: `Write to ${EMAIL}` });
    expect(deltas(events)).toEqual([`Write to ${EMAIL}`]);
    expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 1)]);
  });

  it('default rules: email redact, phone mask, ip hash, mac/url/apiKey redact, card and ssn block', () => {
    const text = `a ${EMAIL} b 555-123-4567 c 10.0.0.1 d 00:1a:2b:3c:4d:5e e https://user:pw@host.example.com/x f sk-abcdefghij1234567890XYZ`;
    const { model, events } = run(['ok'], undefined, text);
    expect(textOfMessage(model.requests[0].messages[0])).toBe(
      `a [REDACTED_EMAIL] b ***-***-4567 c ${IP_HASH} d [REDACTED_MAC] e [REDACTED_URL] f [REDACTED_API_KEY]`,
    );
    expect(ofType(events, 'pii-detected').map((e) => [e.piiType, e.strategy, e.count])).toEqual([
      ['email', 'redact', 1],
      ['phone', 'mask', 1],
      ['ip', 'hash', 1],
      ['mac', 'redact', 1],
      ['url', 'redact', 1],
      ['apiKey', 'redact', 1],
    ]);
    for (const blocked of [CARD, '123-45-6789']) {
      const r = run(['ok'], undefined, `x ${blocked}`);
      expect(r.model.calls).toBe(0);
      expect(runEnd(r.events).reason).toBe('error');
    }
  });

  describe('input', () => {
    it('each strategy replaces exactly: what the model receives and what the session keeps', () => {
      const options: PiiRedactionOptions = { rules: { email: 'mask', creditCard: 'mask', phone: 'mask', ip: 'hash', ssn: 'redact' } };
      const input = `me ${EMAIL}, card ${CARD}, tel (555) 123-4567, host 10.0.0.1, ssn 123-45-6789`;
      const expected = `me j***@example.com, card ****-****-****-1111, tel ***-***-4567, host ${IP_HASH}, ssn [REDACTED_SSN]`;
      const { model, session, events } = run(['Noted.'], options, input);
      expect(model.requests[0].messages).toEqual([textLike('user', expected)]);
      expect(session.messages).toEqual([textLike('user', expected), textLike('assistant', 'Noted.')]);
      expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Noted.' });
    });

    it('hash is stable for equal values and differs for different ones', () => {
      const { model } = run(['ok'], { rules: { ip: 'hash' } }, '10.0.0.1 then 10.0.0.1 then 10.0.0.2');
      expect(textOfMessage(model.requests[0].messages[0])).toBe(`${IP_HASH} then ${IP_HASH} then <ip_hash:cb5f37b4>`);
    });

    it('`rules` changes the strategy of the types it lists, false turns one off, and the others keep their defaults', () => {
      const { model, events } = run(['ok'], { rules: { phone: 'redact', ip: false, creditCard: false } }, `${EMAIL} 555-123-4567 10.0.0.1 ${CARD}`);
      expect(textOfMessage(model.requests[0].messages[0])).toBe(`[REDACTED_EMAIL] [REDACTED_PHONE] 10.0.0.1 ${CARD}`);
      expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 1), detected('phone', 'redact', 1)]);
      // A rule for another type does not turn off the blocking of cards.
      const blocked = run(['ok'], { rules: { email: 'mask' } }, `${EMAIL} ${CARD}`);
      expect(blocked.model.requests).toHaveLength(0);
      expect(ofType(blocked.events, 'error')[0]).toMatchObject({ error: { name: 'PiiDetectedError' } });
    });

    it('rules turning every type off, with no custom detector, change nothing and add no hook', () => {
      const middleware = piiRedaction({ rules: NONE, applyToOutput: true, applyToToolResults: true });
      expect(middleware).toEqual({ name: 'piiRedaction' });
    });

    it('only user text parts of this turn; events per type per message; unchanged messages keep their identity', () => {
      const clean = textMessage('user', 'nothing here');
      const input: Message[] = [
        {
          role: 'user',
          content: [
            { type: 'text', text: `a ${EMAIL}` },
            { type: 'text', text: 'b x@y.io, z@w.io' },
          ],
        },
        clean,
        textMessage('assistant', `assistant says ${EMAIL}`),
        textMessage('user', 'ring 555-123-4567 or x@y.io'),
      ];
      const session = createSession();
      const model = scriptedModel(['ok', 'ok']);
      const agent = createAgent({ model, middleware: [piiRedaction()] });
      const events = collect(agent.run(input, { runId: 'r', session }));
      const sent = model.requests[0].messages;
      expect(sent.map(textOfMessage)).toEqual([
        'a [REDACTED_EMAIL]|b [REDACTED_EMAIL], [REDACTED_EMAIL]',
        'nothing here',
        `assistant says ${EMAIL}`,
        'ring ***-***-4567 or [REDACTED_EMAIL]',
      ]);
      expect(sent[1]).toBe(clean);
      expect(sent[2]).toBe(input[2]);
      expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 3), detected('phone', 'mask', 1), detected('email', 'redact', 1)]);
      // The next turn only looks at its own input (history is already redacted).
      const second = collect(agent.run(`again ${EMAIL}`, { runId: 'r2', session }));
      expect(textOfMessage(model.requests[1].messages[5])).toBe('again [REDACTED_EMAIL]');
      expect(ofType(second, 'pii-detected')).toEqual([detected('email', 'redact', 1, 'r2')]);
    });

    it('block: the run fails with PiiDetectedError before any model call; the event comes first', () => {
      const { events, model, session } = run(['never'], undefined, `pay with ${CARD} or 4111-1111-1111-1111, ${EMAIL}`);
      expect(model.calls).toBe(0);
      const types = events.map((e) => e.type);
      expect(types).toEqual(['run-start', 'pii-detected', 'pii-detected', 'error', 'run-end']);
      expect(ofType(events, 'pii-detected')).toEqual([detected('creditCard', 'block', 2), detected('email', 'redact', 1)]);
      expect(ofType(events, 'error')[0]).toMatchObject({
        source: 'middleware',
        middleware: 'piiRedaction',
        error: { name: 'PiiDetectedError', message: 'PII detected: creditCard' },
      });
      expect(runEnd(events).reason).toBe('error');
      expect(JSON.stringify(events)).not.toMatch(/4111[ -]1111/); // not '4111' alone: a random run id may hold it
      void session;
    });

    it('block: the blocked input is not persisted to the session', () => {
      const { session } = run(['never'], undefined, `pay with ${CARD}`);
      expect(session.messages).toEqual([]);
      expect(JSON.stringify(session.snapshot())).not.toMatch(/4111[ -]1111/);
    });

    it('applyToInput: false leaves the input alone', () => {
      const { model, events } = run(['ok'], { applyToInput: false }, `mail ${EMAIL} ${CARD}`);
      expect(textOfMessage(model.requests[0].messages[0])).toBe(`mail ${EMAIL} ${CARD}`);
      expect(ofType(events, 'pii-detected')).toEqual([]);
    });
  });

  describe('output', () => {
    it('a value split across deltas is caught; events, run-end, session and next request carry the redacted text', () => {
      const { events, session, model } = run([{ text: ['mail jo', 'hn@example.', 'com now'] }], { applyToOutput: true, applyToInput: false });
      expect(deltas(events)).toEqual(['mail ', '[REDACTED_EMAIL] ', 'now']);
      expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'mail [REDACTED_EMAIL] now' });
      expect(session.messages[1]).toEqual(textLike('assistant', 'mail [REDACTED_EMAIL] now'));
      expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 1)]);
      expect(model.calls).toBe(1);
      // The event comes after the call's last text and before the iteration ends.
      const types = events.map((e) => e.type);
      expect(types.indexOf('pii-detected')).toBe(types.lastIndexOf('text-delta') + 1);
      expect(types.indexOf('pii-detected')).toBeLessThan(types.indexOf('iteration-end'));
    });

    it('each strategy on the stream, held text flushed before finish', () => {
      const options: PiiRedactionOptions = { applyToOutput: true, rules: { email: 'mask', phone: 'mask', ip: 'hash', creditCard: 'mask' } };
      const { events } = run([{ text: ['Reach ', 'john@exa', 'mple.com or 555-', '123-', '4567 at 10.0.', '0.1 card 4111 1111 ', '1111 1111'] }], options);
      const text = `Reach j***@example.com or ***-***-4567 at ${IP_HASH} card ****-****-****-1111`;
      expect(deltas(events).join('')).toBe(text);
      expect(deltas(events)).not.toContain('');
      expect(runEnd(events).text).toBe(text);
      expect(ofType(events, 'pii-detected')).toEqual([
        detected('email', 'mask', 1),
        detected('phone', 'mask', 1),
        detected('ip', 'hash', 1),
        detected('creditCard', 'mask', 1),
      ]);
    });

    it('clean deltas are forwarded as the very same update objects; other updates pass through in order', () => {
      const updates: ModelUpdate[] = [
        { type: 'reasoning-delta', text: 'hmm' },
        { type: 'text-delta', text: 'tok ' },
        { type: 'text-delta', text: 'tok ' },
        { type: 'usage', inputTokens: 1, outputTokens: 2 },
        { type: 'text-delta', text: 'ends at 555-123-' },
        { type: 'text-delta', text: '4567' },
        { type: 'finish', reason: 'stop' },
      ];
      const { out, emitted } = wrapOnly({ applyToOutput: true }, updates);
      expect(out[0]).toBe(updates[0]);
      expect(out[1]).toBe(updates[1]);
      expect(out[2]).toBe(updates[2]);
      expect(out.slice(3)).toEqual([
        updates[3],
        { type: 'text-delta', text: 'ends at ' },
        { type: 'text-delta', text: '***-***-4567' },
        { type: 'finish', reason: 'stop' },
      ]);
      expect(emitted).toEqual([{ type: 'pii-detected', piiType: 'phone', strategy: 'mask', count: 1 }]);
    });

    it('a consumer that unsubscribes on the flushed text gets nothing more, and nothing throws', async () => {
      for (const updates of [
        [
          { type: 'text-delta', text: 'ends at 555-123-' },
          { type: 'finish', reason: 'stop' },
        ],
        [{ type: 'text-delta', text: 'ends at 555-123-' }],
      ] as ModelUpdate[][]) {
        const ctx = { iteration: 0, emit: () => undefined } as unknown as ModelCallContext;
        const seen: ModelUpdate[] = [];
        const errors: unknown[] = [];
        // takeWhile(…, true) unsubscribes from the wrapper inside the flush's emission.
        const isHeldText = (u: ModelUpdate) => u.type === 'text-delta' && u.text.includes('555');
        // A throw after the unsubscribe reaches rxjs only as a notification to a stopped subscriber,
        // which rxjs reports on a timer.
        const stopped: unknown[] = [];
        config.onStoppedNotification = (notification) => notification.kind === 'E' && stopped.push(notification.error);
        try {
          of(...updates)
            .pipe(
              piiRedaction({ applyToOutput: true }).wrapModel!(ctx),
              takeWhile((u) => !isHeldText(u), true),
            )
            .subscribe({ next: (u) => seen.push(u), error: (e) => errors.push(e) });
          await new Promise((resolve) => setTimeout(resolve, 0));
        } finally {
          config.onStoppedNotification = null;
        }
        expect(stopped).toEqual([]);
        expect(errors).toEqual([]);
        expect(seen).toEqual([
          { type: 'text-delta', text: 'ends at ' },
          { type: 'text-delta', text: '555-123-' },
        ]);
      }
    });

    it('a stream that completes without finish is flushed too', () => {
      const { out } = wrapOnly({ applyToOutput: true }, [{ type: 'text-delta', text: `to ${EMAIL}` }]);
      expect(out).toEqual([
        { type: 'text-delta', text: 'to ' },
        { type: 'text-delta', text: '[REDACTED_EMAIL]' },
      ]);
    });

    it('block on output: the event, then the run fails with PiiDetectedError; the raw value never streams', () => {
      const { events } = run([{ text: ['card 4111 1111', ' 1111 1111 thanks'] }], { applyToOutput: true });
      expect(
        ofType(events, 'text-delta')
          .map((e) => e.text)
          .join(''),
      ).not.toContain('4111');
      expect(JSON.stringify(events)).not.toMatch(/4111[ -]1111/); // not '4111' alone: a random run id may hold it
      expect(ofType(events, 'pii-detected')).toEqual([detected('creditCard', 'block', 1)]);
      expect(ofType(events, 'error')[0].error).toMatchObject({ name: 'PiiDetectedError', message: 'PII detected: creditCard' });
      expect(runEnd(events).reason).toBe('error');
      const types = events.map((e) => e.type);
      expect(types.indexOf('pii-detected')).toBeLessThan(types.indexOf('error'));
    });

    it('block surfaces as a PiiDetectedError and unsubscribes the model', () => {
      let unsubscribed = false;
      const source = new Observable<ModelUpdate>((s) => {
        s.next({ type: 'text-delta', text: 'ssn 123-45-6789 is mine ' });
        return () => (unsubscribed = true);
      });
      const emitted: unknown[] = [];
      const ctx = { iteration: 0, emit: (e: unknown) => emitted.push(e) } as unknown as ModelCallContext;
      let error: unknown;
      source.pipe(piiRedaction({ applyToOutput: true }).wrapModel!(ctx)).subscribe({ error: (e) => (error = e) });
      expect(error).toBeInstanceOf(PiiDetectedError);
      expect(error).toMatchObject({ name: 'PiiDetectedError', piiType: 'ssn', count: 1 });
      expect(unsubscribed).toBe(true);
      expect(emitted).toEqual([{ type: 'pii-detected', piiType: 'ssn', strategy: 'block', count: 1 }]);
    });

    it('a model error: values already replaced are reported, held text is dropped', () => {
      const boom = new Error('boom');
      const { out, emitted, error } = wrapOnly({ applyToOutput: true }, []);
      expect(out).toEqual([]);
      expect(emitted).toEqual([]);
      expect(error).toBeUndefined();
      const got: ModelUpdate[] = [];
      const events: unknown[] = [];
      const ctx = { iteration: 0, emit: (e: unknown) => events.push(e) } as unknown as ModelCallContext;
      new Observable<ModelUpdate>((s) => {
        s.next({ type: 'text-delta', text: `${EMAIL} and jane@exa` });
        s.error(boom);
      })
        .pipe(piiRedaction({ applyToOutput: true }).wrapModel!(ctx))
        .subscribe({ next: (u) => got.push(u), error: (e) => expect(e).toBe(boom) });
      expect(got).toEqual([{ type: 'text-delta', text: '[REDACTED_EMAIL] and ' }]);
      expect(events).toEqual([{ type: 'pii-detected', piiType: 'email', strategy: 'redact', count: 1 }]);
    });

    it('events per model call: each iteration reports its own counts', () => {
      const echo = defineTool({ name: 'echo', description: 'e', parameters: z.object({}), execute: () => 'ok' });
      const { events } = run([{ text: `${EMAIL} and a@b.io`, toolCalls: [{ name: 'echo', args: {} }] }, 'again x@y.io'], { applyToOutput: true }, 'go', {
        tools: [echo],
      });
      expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 2), detected('email', 'redact', 1)]);
      expect(runEnd(events).text).toBe('again [REDACTED_EMAIL]');
    });

    it('concurrent runs of one agent do not share redactor state', () => {
      const ts = new TestScheduler((a, b) => expect(a).toEqual(b));
      const userText = (r: ModelRequest) => textOfMessage(r.messages[0]);
      const model = scriptedModel(
        [(r) => (userText(r) === 'A' ? { text: ['mail jo', 'hn@example.', 'com now'], delay: 2 } : { text: ['ping ', 'pong'], delay: 3 })],
        { scheduler: ts, loop: true },
      );
      const agent = createAgent({ model, middleware: [piiRedaction({ applyToOutput: true })], scheduler: ts });
      const events: AgentEvent[] = [];
      ts.run(() => {
        merge(agent.run('A', { runId: 'a' }), agent.run('B', { runId: 'b' })).subscribe((e) => events.push(e));
      });
      const a = events.filter((e) => e.runId === 'a');
      const b = events.filter((e) => e.runId === 'b');
      expect(deltas(a)).toEqual(['mail ', '[REDACTED_EMAIL] ', 'now']);
      expect(deltas(b)).toEqual(['ping ', 'pong']);
      expect(runEnd(a).text).toBe('mail [REDACTED_EMAIL] now');
      expect(runEnd(b).text).toBe('ping pong');
      expect(ofType(a, 'pii-detected')).toEqual([detected('email', 'redact', 1, 'a')]);
      expect(ofType(b, 'pii-detected')).toEqual([]);
    });
  });

  describe('tool results', () => {
    it('strings nested in objects and arrays are redacted without mutating the original; one event per type per result', () => {
      const original = {
        owner: EMAIL,
        contacts: [{ phone: '555-123-4567', note: 'none' }, 'x@y.io', 42, null],
        meta: { ok: true, hosts: ['10.0.0.1'] },
      };
      const snapshot = JSON.parse(JSON.stringify(original));
      const lookup = defineTool({ name: 'lookup', description: 'l', parameters: z.object({}), execute: () => original });
      const plain = defineTool({ name: 'plain', description: 'p', parameters: z.object({}), execute: () => `mail ${EMAIL}` });
      const { model, events } = run(
        [
          {
            toolCalls: [
              { name: 'lookup', args: {}, callId: 'c1' },
              { name: 'plain', args: {}, callId: 'c2' },
            ],
          },
          'done',
        ],
        { applyToInput: false, applyToToolResults: true },
        'go',
        { tools: [lookup, plain] },
      );
      const results = model.requests[1].messages[2].content;
      expect(results[0]).toMatchObject({
        callId: 'c1',
        result: {
          owner: '[REDACTED_EMAIL]',
          contacts: [{ phone: '***-***-4567', note: 'none' }, '[REDACTED_EMAIL]', 42, null],
          meta: { ok: true, hosts: [IP_HASH] },
        },
      });
      expect(results[1]).toMatchObject({ callId: 'c2', result: 'mail [REDACTED_EMAIL]' });
      expect(original).toEqual(snapshot);
      const r0 = (results[0] as { result: typeof original }).result;
      expect(r0.contacts[0]).not.toBe(original.contacts[0]);
      expect(ofType(events, 'pii-detected')).toEqual([
        detected('email', 'redact', 2),
        detected('phone', 'mask', 1),
        detected('ip', 'hash', 1),
        detected('email', 'redact', 1),
      ]);
    });

    it('a clean result is passed on as the same object', () => {
      const value = { a: ['b', { c: 'd' }] };
      const tool = defineTool({ name: 't', description: 't', parameters: z.object({}), execute: () => value });
      const { model, events } = run([{ toolCalls: [{ name: 't', args: {} }] }, 'done'], { applyToToolResults: true }, 'go', { tools: [tool] });
      expect((model.requests[1].messages[2].content[0] as { result: unknown }).result).toBe(value);
      expect(ofType(events, 'pii-detected')).toEqual([]);
    });

    it('a plain object with a toJSON is redacted as the JSON the model reads', () => {
      const tool = defineTool({ name: 't', description: 't', parameters: z.object({}), execute: () => ({ user: { toJSON: () => 'john@example.com' } }) });
      const { model, events } = run([{ toolCalls: [{ name: 't', args: {} }] }, 'done'], { applyToToolResults: true }, 'go', { tools: [tool] });
      expect(JSON.stringify(model.requests[1].messages)).not.toContain('john@example.com');
      expect((model.requests[1].messages[2].content[0] as { result: unknown }).result).toEqual({ user: '[REDACTED_EMAIL]' });
      expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 1)]);
    });

    it('block in a tool result fails the run before the model reads it', () => {
      const tool = defineTool({ name: 't', description: 't', parameters: z.object({}), execute: () => ({ ssn: '123-45-6789' }) });
      const { model, events } = run([{ toolCalls: [{ name: 't', args: {} }] }, 'done'], { applyToToolResults: true }, 'go', { tools: [tool] });
      expect(model.calls).toBe(1);
      expect(ofType(events, 'pii-detected')).toEqual([detected('ssn', 'block', 1)]);
      expect(ofType(events, 'error')[0]).toMatchObject({ source: 'middleware', error: { name: 'PiiDetectedError' } });
      expect(runEnd(events).reason).toBe('error');
    });
  });

  describe('custom detectors', () => {
    const custom: PiiRedactionOptions['custom'] = [
      { name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'redact' },
      {
        name: 'codeName',
        detector: (text) => {
          const spans: Array<{ start: number; end: number }> = [];
          for (let i = text.indexOf('Bluebird'); i >= 0; i = text.indexOf('Bluebird', i + 1)) spans.push({ start: i, end: i + 8 });
          return spans;
        },
        strategy: 'hash',
      },
      { name: 'ticket', detector: /TCK-\d+/g, strategy: 'mask' },
    ];

    it('RegExp and function detectors on input, with the built-in types still active', () => {
      const { model, events } = run(['ok'], { custom }, `EMP-123456 on Bluebird, TCK-98765, ${EMAIL}, EMP-000001`);
      const text = textOfMessage(model.requests[0].messages[0]);
      expect(text).toMatch(/^\[REDACTED_EMPLOYEE_ID\] on <codeName_hash:[0-9a-f]{8}>, \*{5}8765, \[REDACTED_EMAIL\], \[REDACTED_EMPLOYEE_ID\]$/);
      expect(ofType(events, 'pii-detected')).toEqual([
        detected('employeeId', 'redact', 2),
        detected('codeName', 'hash', 1),
        detected('ticket', 'mask', 1),
        detected('email', 'redact', 1),
      ]);
    });

    it('a custom value split across deltas is caught on output', () => {
      const { events } = run([{ text: ['badge EM', 'P-12', '3456 ok'] }], { rules: NONE, custom, applyToOutput: true });
      expect(runEnd(events).text).toBe('badge [REDACTED_EMPLOYEE_ID] ok');
      expect(ofType(events, 'pii-detected')).toEqual([detected('employeeId', 'redact', 1)]);
    });

    it('a custom block strategy fails the run', () => {
      const { model, events } = run(['ok'], { rules: NONE, custom: [{ name: 'secret', detector: /TOPSECRET/, strategy: 'block' }] }, 'this is TOPSECRET');
      expect(model.calls).toBe(0);
      expect(ofType(events, 'pii-detected')).toEqual([detected('secret', 'block', 1)]);
      expect(ofType(events, 'error')[0].error).toEqual({ name: 'PiiDetectedError', message: 'PII detected: secret' });
    });
  });

  it('one instance serves many agents and runs (no state in the factory)', () => {
    const middleware: AgentMiddleware = piiRedaction({ applyToOutput: true });
    const agentA = createAgent({ model: scriptedModel([{ text: ['x jo', 'hn@example.com'] }]), middleware: [middleware] });
    const agentB = createAgent({ model: scriptedModel([{ text: ['@example.com y'] }]), middleware: [middleware] });
    expect(runEnd(collect(agentA.run('a'))).text).toBe('x [REDACTED_EMAIL]');
    expect(runEnd(collect(agentB.run('b'))).text).toBe('@example.com y');
  });
});

describe('piiRedaction on tool results the model reads as JSON', () => {
  const EMAIL = 'john@example.com';
  const resultSent = async (execute: () => unknown) => {
    const tool = defineTool({ name: 'lookup', description: 'Looks up', parameters: z.object({}), execute });
    const model = scriptedModel([{ toolCalls: [{ name: 'lookup', args: {}, callId: 'c1' }] }, 'done']);
    await createAgent({ model, tools: [tool], middleware: [piiRedaction({ applyToToolResults: true })] }).invoke('go');
    return (model.requests[1].messages[2].content[0] as { result: unknown }).result;
  };

  it('a class instance: its JSON form, redacted, replaces it', async () => {
    class Customer {
      constructor(
        readonly name: string,
        readonly email: string,
      ) {}
    }
    expect(await resultSent(() => new Customer('John', EMAIL))).toEqual({ name: 'John', email: '[REDACTED_EMAIL]' });
    const clean = new Customer('John', 'none');
    expect(await resultSent(() => clean)).toBe(clean); // nothing to redact: left as it was
    const cyclic = new Customer('John', EMAIL) as Customer & { self?: unknown };
    cyclic.self = cyclic;
    // No JSON form: piiRedaction leaves it as it is, and the run makes it an error result saying why.
    expect(await resultSent(() => cyclic)).toMatch(/^The tool result could not be sent: Converting circular structure to JSON/);
  });

  it('object keys are redacted too, in their order', async () => {
    expect(await resultSent(() => ({ first: 1, [EMAIL]: { note: `mail ${EMAIL}` }, last: 2 }))).toEqual({
      first: 1,
      '[REDACTED_EMAIL]': { note: 'mail [REDACTED_EMAIL]' },
      last: 2,
    });
  });
});

describe('piiRedaction reports what it found with a block', () => {
  const TEXT = 'Mail john@example.com,4111111111111111.';
  const detections = (events: AgentEvent[]) => eventsOfType(events, 'pii-detected').map((e) => e.piiType);

  it('in the input and in the streamed output alike: every type of the message, block included', () => {
    const input = collectEvents(createAgent({ model: scriptedModel(['ok']), middleware: [piiRedaction()] }).run(TEXT));
    expect(detections(input)).toEqual(['email', 'creditCard']);
    const output = collectEvents(createAgent({ model: scriptedModel([TEXT]), middleware: [piiRedaction({ applyToOutput: true })] }).run('hi'));
    expect(detections(output)).toEqual(['email', 'creditCard']);
  });
});

describe('piiRedaction keys that redact alike', () => {
  it('keep every value, told apart', async () => {
    const tool = defineTool({
      name: 'roles',
      description: 'Roles',
      parameters: z.object({}),
      execute: () => ({ 'ada@example.com': 'admin', 'bob@example.com': 'viewer', constructor: 'x' }),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'roles', args: {} }] }, 'done']);
    await createAgent({ model, tools: [tool], middleware: [piiRedaction({ applyToToolResults: true })] }).invoke('go');
    expect((model.requests[1].messages[2].content[0] as { result: unknown }).result).toEqual({
      '[REDACTED_EMAIL]': 'admin',
      '[REDACTED_EMAIL] (2)': 'viewer',
      constructor: 'x',
    });
  });
});

describe('piiRedaction when the consumer leaves on its pii-detected event', () => {
  /**
   * The event is reported at the end of the model stream, just before the stream completes (or
   * errors); a consumer that cancels in reaction to it tears the subscriber down in between.
   */
  it.each([
    ['signal', 'completes'],
    ['handle', 'completes'],
    ['unsubscribe', 'completes'],
    ['signal', 'errors'],
    ['handle', 'errors'],
  ] as const)('a run cancelled (%s) on the pii-detected of a model stream that %s ends cancelled', (how, ending) => {
    const ts = new TestScheduler((a, b) => expect(a).toEqual(b));
    const labels: string[] = [];
    ts.run(() => {
      const turn: ScriptedTurn = { text: ['Mail ann@example.com', ' today'], delay: 1, ...(ending === 'errors' ? { error: new Error('cut') } : {}) };
      const model = scriptedModel([turn], { scheduler: ts });
      const agent = createAgent({ model, middleware: [piiRedaction({ applyToOutput: true })], scheduler: ts });
      const controller = new AbortController();
      const stop$ = new Subject<void>();
      let handle: RunHandle | undefined;
      const onEvent = (e: AgentEvent) => {
        labels.push(eventLabel(e));
        if (e.type !== 'pii-detected') return;
        if (how === 'signal') controller.abort();
        else if (how === 'handle') handle?.cancel();
        else stop$.next();
      };
      if (how === 'handle') {
        handle = agent.start('go');
        handle.events$.subscribe(onEvent);
      } else {
        agent.run('go', { signal: controller.signal }).pipe(tap(onEvent), takeUntil(stop$)).subscribe();
      }
    });
    const text = labels
      .filter((label) => label.startsWith('text-delta:'))
      .map((label) => label.slice('text-delta:'.length))
      .join('');
    // On an error, the text held back (it could end in a raw value) is dropped.
    expect(text).toBe(ending === 'errors' ? 'Mail [REDACTED_EMAIL] ' : 'Mail [REDACTED_EMAIL] today');
    expect(labels.filter((label) => !label.startsWith('text-delta:'))).toEqual([
      'run-start',
      'iteration-start',
      'pii-detected',
      ...(how === 'unsubscribe' ? [] : ['run-end:cancelled']),
    ]);
  });
});

describe('piiRedaction outside a retry', () => {
  const failing = new ModelError('upstream 503', { status: 503 });

  it.each([
    ['modelRetry', () => modelRetry({ maxRetries: 1, initialDelayMs: 0, scheduler: queueScheduler })],
    ['a hand-written rxjs retry()', (): AgentMiddleware => ({ name: 'plainRetry', wrapModel: () => (source) => source.pipe(retry(1)) })],
  ])('drops the text a failed attempt left held back (%s)', (_, inner) => {
    // The first attempt ends on a cut value; glued to the next attempt's text it would not be recognised.
    const model = scriptedModel([{ text: ['Write to bob@exa'], error: failing }, { text: ['mple.com is not it. ', 'Hello there.'] }]);
    const agent = createAgent({ model, middleware: [piiRedaction({ applyToOutput: true, applyToInput: false }), inner()] });
    const events = collect(agent.run('hi', { runId: 'r' }));
    const text = deltas(events).join('');
    expect(text).not.toContain('bob@exa');
    expect(text.endsWith('mple.com is not it. Hello there.')).toBe(true);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'mple.com is not it. Hello there.' });
    expect(model.calls).toBe(2);
  });

  it('reports what a dropped attempt replaced together with the rest', () => {
    const model = scriptedModel([{ text: ['mail john@example.com now ', 'and bob@exa'], error: failing }, { text: ['ok, jane@example.com'] }]);
    const agent = createAgent({
      model,
      middleware: [piiRedaction({ applyToOutput: true, applyToInput: false }), modelRetry({ maxRetries: 1, initialDelayMs: 0, scheduler: queueScheduler })],
    });
    const events = collect(agent.run('hi', { runId: 'r' }));
    expect(runEnd(events).text).toBe('ok, [REDACTED_EMAIL]');
    expect(ofType(events, 'pii-detected')).toEqual([detected('email', 'redact', 2)]);
  });
});

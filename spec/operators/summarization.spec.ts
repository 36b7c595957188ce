import { Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, textMessage, textOf, type Message, type ModelClient } from '../../src/index';
import { eventLabels, scriptedModel, collectEvents, eventsOfType } from '../../src/testing/index';
import { DEFAULT_SUMMARY_PROMPT, summarization, type SummarizationOptions } from '../../operators/summarization';
import { costBudget } from '../../operators/costBudget';
import { textLike } from '../support/textLike';

const collect = collectEvents;
const ofType = eventsOfType;
const PREFIX = 'Here is a summary of the conversation to date:';

/** user, assistant, user, assistant (tool call), tool, assistant — 6 messages. */
function history(): Message[] {
  const messages: Message[] = [
    textMessage('user', 'My name is Ada.'),
    textMessage('assistant', 'Hello Ada.'),
    textMessage('user', 'Weather in Paris?'),
    { role: 'assistant', content: [{ type: 'tool-call', callId: 'w1', name: 'weather', args: { city: 'Paris' } }] },
    { role: 'tool', content: [{ type: 'tool-result', callId: 'w1', name: 'weather', result: { celsius: 21 }, isError: false }] },
    textMessage('assistant', 'It is 21°C.'),
  ];
  return messages.map((m, i) => ({ ...m, id: `h${i}` })); // the same ids on every call
}

function setup(options: Omit<SummarizationOptions, 'model'>, summaries: readonly string[] = ['Ada asked about Paris: 21°C.']) {
  const summarizer = scriptedModel(summaries);
  const model = scriptedModel(['Answer', 'Second answer']);
  const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
  const agent = createAgent({ model, middleware: [summarization({ model: summarizer, ...options })] });
  return { summarizer, model, session, agent };
}

describe('summarization', () => {
  it("counts the summary call's usage in the iteration's usage, run-end.usage and costBudget", () => {
    const summarizer = scriptedModel([{ text: 'Ada asked about Paris.', usage: { inputTokens: 400, outputTokens: 20 } }]);
    const model = scriptedModel([{ text: 'Answer', usage: { inputTokens: 30, outputTokens: 5 } }]);
    const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
    const pricing = { inputPerToken: 0.001, outputPerToken: 0.01 };
    const agent = createAgent({
      model,
      middleware: [costBudget({ maxCost: 10, pricing }), summarization({ model: summarizer, trigger: { messages: 6 }, keep: { messages: 2 } })],
    });
    const events = collect(agent.run('hi', { session }));
    expect(ofType(events, 'iteration-end')[0].usage).toEqual({ inputTokens: 430, outputTokens: 25 });
    expect(ofType(events, 'cost-recorded')).toEqual([expect.objectContaining({ inputTokens: 430, outputTokens: 25 })]);
    expect(ofType(events, 'run-end')[0].usage).toEqual({ inputTokens: 430, outputTokens: 25 });
  });

  it('checks its options', () => {
    const model: ModelClient = () => new Observable();
    expect(() => summarization(undefined as unknown as SummarizationOptions)).toThrow(
      new TypeError("summarization: options must be an object with 'model' and 'trigger', got undefined"),
    );
    expect(() => summarization({ trigger: { messages: 3 } } as SummarizationOptions)).toThrow(/'model' must be a ModelClient/);
    expect(() => summarization({ model } as SummarizationOptions)).toThrow(new TypeError("summarization: 'trigger' is required: { tokens?, messages? }"));
    expect(() => summarization({ model, trigger: {} })).toThrow(new TypeError("summarization: 'trigger' needs 'tokens' or 'messages'"));
    expect(() => summarization({ model, trigger: { tokens: -5 } })).toThrow(/'trigger.tokens' must be a non-negative integer/);
    expect(() => summarization({ model, trigger: { messages: 5 }, keep: { messages: -1 } })).toThrow(/'keep.messages'/);
  });

  it('refuses an unknown option in trigger and keep, naming its path', () => {
    const model: ModelClient = () => new Observable();
    expect(() => summarization({ model, trigger: { tokens: 4000, mesages: 50 } } as never)).toThrow(
      new TypeError("summarization: unknown option(s) 'trigger.mesages' (known: trigger.tokens, trigger.messages)"),
    );
    // Named as misspelt, not as a trigger without tokens or messages.
    expect(() => summarization({ model, trigger: { token: 4000 } } as never)).toThrow(
      new TypeError("summarization: unknown option(s) 'trigger.token' (known: trigger.tokens, trigger.messages)"),
    );
    expect(() => summarization({ model, trigger: { messages: 50 }, keep: { messages: 20, toolResults: 3 } } as never)).toThrow(
      new TypeError("summarization: unknown option(s) 'keep.toolResults' (known: keep.messages)"),
    );
    expect(() => summarization({ model, trigger: { tokens: 4000, messages: 50 }, keep: { messages: 20 } })).not.toThrow();
  });

  it('does nothing when the messages are exactly at the trigger', () => {
    const { summarizer, model, session, agent } = setup({ trigger: { messages: 7 }, keep: { messages: 2 } });
    const events = collect(agent.run('hi', { session }));
    expect(summarizer.calls).toBe(0);
    expect(model.requests[0].messages).toHaveLength(7);
    expect(ofType(events, 'summarized')).toEqual([]);
  });

  it('one message past the trigger, summarises all but the kept tail into one user message, in the session too', () => {
    const { summarizer, model, session, agent } = setup({ trigger: { messages: 6 }, keep: { messages: 2 } });
    const events = collect(agent.run('hi', { session, runId: 'r' }));
    const summary = textLike('user', `${PREFIX}\n\nAda asked about Paris: 21°C.`);
    expect(model.requests[0].messages).toEqual([summary, textLike('assistant', 'It is 21°C.'), textLike('user', 'hi')]);
    expect(ofType(events, 'summarized')).toEqual([{ type: 'summarized', runId: 'r', messagesBefore: 7, messagesAfter: 3 }]);
    // The summarising call's text is not part of the run's events.
    expect(ofType(events, 'text-delta').map((e) => e.text)).toEqual(['Answer']);
    expect(session.messages).toEqual([summary, textLike('assistant', 'It is 21°C.'), textLike('user', 'hi'), textLike('assistant', 'Answer')]);
    // The summariser got the transcript of the 5 older messages in the default prompt.
    const prompt = textOf(summarizer.requests[0].messages[0]);
    expect(summarizer.requests[0].tools).toEqual([]);
    expect(prompt).toBe(
      DEFAULT_SUMMARY_PROMPT.replace(
        '{messages}',
        [
          'user: My name is Ada.',
          'assistant: Hello Ada.',
          'user: Weather in Paris?',
          'assistant: [call weather({"city":"Paris"})]',
          'tool weather: {"celsius":21}',
        ].join('\n'),
      ),
    );
  });

  it('a summary model that answers no text (empty, or filtered) summarises nothing: the call goes ahead, summary-skipped says why', () => {
    for (const [answer, reason] of [
      [{ text: '  ' }, 'no-text'],
      [{ text: 'partial', finish: 'content-filter' as const }, 'content-filter'],
    ] as const) {
      const summarizer = scriptedModel([answer]);
      const model = scriptedModel(['Answer']);
      const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
      const agent = createAgent({ model, middleware: [summarization({ model: summarizer, trigger: { messages: 6 }, keep: { messages: 2 } })] });
      const events = collect(agent.run('hi', { session, runId: 'r' }));
      expect(ofType(events, 'summarized')).toEqual([]);
      expect(ofType(events, 'summary-skipped')).toEqual([{ type: 'summary-skipped', runId: 'r', reason }]);
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(model.requests[0].messages).toEqual([...history(), textLike('user', 'hi')]);
      expect(session.messages).toEqual([...history(), textLike('user', 'hi'), textLike('assistant', 'Answer')]);
    }
  });

  it('after a summary-skipped, the run does not ask the summary model again; the next run does', () => {
    const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({}), execute: () => 'x' });
    const summarizer = scriptedModel(['', 'Summary.']);
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: {} }] }, { toolCalls: [{ name: 'echo', args: {} }] }, 'Answer', 'Second answer']);
    const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
    const agent = createAgent({ model, tools: [echo], middleware: [summarization({ model: summarizer, trigger: { messages: 6 }, keep: { messages: 2 } })] });
    const first = collect(agent.run('hi', { session }));
    expect(ofType(first, 'summary-skipped')).toHaveLength(1);
    expect(summarizer.calls).toBe(1); // three model calls, one summary call
    const second = collect(agent.run('again', { session }));
    expect(ofType(second, 'summarized')).toHaveLength(1);
    expect(summarizer.calls).toBe(2);
  });

  it('a second summarization (another model) still summarises after the first one skipped', () => {
    const empty = scriptedModel(['']);
    const fallback = scriptedModel(['Summary.']);
    const model = scriptedModel(['Answer']);
    const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
    const options = { trigger: { messages: 6 }, keep: { messages: 2 } };
    const agent = createAgent({ model, middleware: [summarization({ model: empty, ...options }), summarization({ model: fallback, ...options })] });
    const events = collect(agent.run('hi', { session }));
    expect(ofType(events, 'summary-skipped')).toHaveLength(1);
    expect(ofType(events, 'summarized')).toHaveLength(1);
    expect(fallback.calls).toBe(1);
  });

  it('never starts the kept tail with a tool result: the call that made it is kept too', () => {
    // keep 3 would start the tail at the tool result: the tail starts at its assistant call instead.
    const { model, session, agent } = setup({ trigger: { messages: 6 }, keep: { messages: 3 } });
    const events = collect(agent.run('hi', { session }));
    expect(model.requests[0].messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant', 'user']);
    expect(model.requests[0].messages[1].content[0]).toMatchObject({ type: 'tool-call', callId: 'w1' });
    expect(ofType(events, 'summarized')[0]).toMatchObject({ messagesBefore: 7, messagesAfter: 5 });
  });

  it('triggers on tokens (characters / 4) only when over the threshold', () => {
    // 15 + 10 + 17 + 16 ({"city":"Paris"}) + 14 ({"celsius":21}) + 11 + 2 ('hi') = 85 characters → 22 tokens.
    const atThreshold = setup({ trigger: { tokens: 22 }, keep: { messages: 2 } });
    expect(ofType(collect(atThreshold.agent.run('hi', { session: atThreshold.session })), 'summarized')).toEqual([]);
    expect(atThreshold.summarizer.calls).toBe(0);
    const { summarizer, agent, session } = setup({ trigger: { tokens: 21 }, keep: { messages: 2 } });
    expect(ofType(collect(agent.run('hi', { session })), 'summarized')).toHaveLength(1);
    expect(summarizer.calls).toBe(1);
  });

  it('keeps 20 messages by default: with fewer, nothing is summarised even when triggered', () => {
    const { summarizer, model, session, agent } = setup({ trigger: { messages: 1 } });
    collect(agent.run('hi', { session }));
    expect(summarizer.calls).toBe(0);
    expect(model.requests[0].messages).toHaveLength(7);
  });

  it('uses summaryPrompt and summaryPrefix', () => {
    const { summarizer, model, session, agent } = setup({
      trigger: { messages: 6 },
      keep: { messages: 1 },
      summaryPrompt: 'Summarise:\n{messages}\nEnd.',
      summaryPrefix: 'Before:',
    });
    collect(agent.run('hi', { session }));
    expect(textOf(summarizer.requests[0].messages[0])).toMatch(/^Summarise:\nuser: My name is Ada\.\n[\s\S]*assistant: It is 21°C\.\nEnd\.$/);
    expect(model.requests[0].messages[0]).toEqual(textLike('user', 'Before:\n\nAda asked about Paris: 21°C.'));
  });

  it('the next run of the session starts from the summary', () => {
    const { model, session, agent } = setup({ trigger: { messages: 6 }, keep: { messages: 2 } }, ['S1', 'S2']);
    collect(agent.run('hi', { session }));
    const second = collect(agent.run('again', { session }));
    // [summary, 'It is 21°C.', 'hi', 'Answer', 'again'] = 5 messages: under the trigger.
    expect(ofType(second, 'summarized')).toEqual([]);
    expect(model.requests[1].messages.map(textOf)).toEqual([`${PREFIX}\n\nS1`, 'It is 21°C.', 'hi', 'Answer', 'again']);
  });

  it('summarises again within a run when the tools make the conversation grow', () => {
    const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({}), execute: () => 'ok' });
    const summarizer = scriptedModel(['S1', 'S2']);
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: {} }] }, { toolCalls: [{ name: 'echo', args: {} }] }, 'Done']);
    const agent = createAgent({ model, tools: [echo], middleware: [summarization({ model: summarizer, trigger: { messages: 3 }, keep: { messages: 2 } })] });
    const events = collect(agent.run('go', { runId: 'r' }));
    // Iteration 1: [go, call, result] → not over 3. Iteration 2: 5 messages → summary + [call, result].
    expect(ofType(events, 'summarized').map((e) => [e.messagesBefore, e.messagesAfter])).toEqual([[5, 3]]);
    expect(model.requests[2].messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(textOf(model.requests[2].messages[0])).toBe(`${PREFIX}\n\nS1`);
  });

  it('fails the run when the summarising call fails', () => {
    const failing: ModelClient = () => new Observable((s) => s.error(new Error('summariser down')));
    const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
    const agent = createAgent({
      model: scriptedModel(['x']),
      middleware: [summarization({ model: failing, trigger: { messages: 1 }, keep: { messages: 1 } })],
    });
    const events = collect(agent.run('hi', { session, runId: 'r' }));
    expect(ofType(events, 'error')).toEqual([
      {
        type: 'error',
        runId: 'r',
        source: 'middleware',
        middleware: 'summarization',
        hook: 'beforeIteration',
        error: { name: 'Error', message: 'summariser down' },
      },
    ]);
    // Nothing was summarised (the runtime still saves the failed turn's input).
    expect(session.messages.map(textOf)).toEqual([...history().map(textOf), 'hi']);
  });

  it('waits for the summary in virtual time; its deltas never reach the run', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const summarizer = scriptedModel([{ text: ['Sum', 'mary'], delay: 10 }], { scheduler: testScheduler });
      const session = createSession({ snapshot: { version: 1, id: 's', messages: history(), state: {} } });
      const agent = createAgent({
        model: scriptedModel(['Hi'], { scheduler: testScheduler }),
        middleware: [summarization({ model: summarizer, trigger: { messages: 2 }, keep: { messages: 1 } })],
        scheduler: testScheduler,
      });
      // Summary deltas at 10 and 20 ms, finish at 30 ms.
      expectObservable(agent.run('hi', { session }).pipe(eventLabels())).toBe('(ab) 26ms (cdef|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'summarized',
        d: 'text-delta:Hi',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
    });
  });
});

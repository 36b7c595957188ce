/**
 * An agent that runs in the page itself, bundled for the browser by browser.spec.ts: the built
 * package with the real `openai` client against the fake OpenAI server (another origin, so CORS),
 * a tool, and operators that hash (responseCache's key, piiRedaction's `hash`). The spec calls
 * `window.runAgent(...)` and reads what it returns.
 */
import OpenAI from 'openai';
import { createAgent, defineTool } from 'rx-agent';
import { openAIChat } from 'rx-agent/openai';
import { modelRetry, piiRedaction, responseCache } from 'rx-agent/operators';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { eventLabel as label } from 'rx-agent/testing';

export interface PageRunResult {
  readonly labels: string[];
  /** The `piiType` of each `pii-detected` event, in order. */
  readonly piiTypes: string[];
  readonly text: string;
  readonly toolSawSignal: boolean;
}

declare global {
  interface Window {
    runAgent(baseURL: string, inputs: string[]): Promise<PageRunResult[]>;
    startAndCancel(baseURL: string, input: string): Promise<string[]>;
  }
}

const lookup = defineTool({
  name: 'lookup_host',
  description: 'The address of a host',
  parameters: z.object({ host: z.string() }),
  execute: async ({ host }, ctx) => ({ host, address: '10.1.2.3', signal: ctx.signal instanceof AbortSignal }),
});

function makeAgent(baseURL: string) {
  const client = new OpenAI({ apiKey: 'sk-test', baseURL, dangerouslyAllowBrowser: true });
  return createAgent({
    model: openAIChat({ client, model: 'gpt-test' }),
    tools: [lookup],
    middleware: [
      modelRetry({ initialDelayMs: 10, jitter: 0 }),
      responseCache(),
      piiRedaction({ rules: { ip: 'hash' }, applyToOutput: true, applyToToolResults: true }),
    ],
  });
}

window.runAgent = async (baseURL, inputs) => {
  const agent = makeAgent(baseURL);
  const results: PageRunResult[] = [];
  for (const input of inputs) {
    const events = await lastValueFrom(agent.run(input).pipe(toArray()));
    const end = events.at(-1);
    const toolResult = events.find((e) => e.type === 'tool-result');
    results.push({
      labels: events.map(label),
      piiTypes: events.flatMap((e) => (e.type === 'pii-detected' ? [e.piiType] : [])),
      text: end?.type === 'run-end' ? (end.text ?? '') : '',
      toolSawSignal: toolResult?.type === 'tool-result' && (toolResult.result as { signal?: boolean }).signal === true,
    });
  }
  return results;
};

window.startAndCancel = (baseURL, input) =>
  new Promise((resolve) => {
    const labels: string[] = [];
    const handle = makeAgent(baseURL).start(input);
    handle.events$.subscribe((event) => {
      labels.push(label(event));
      if (event.type === 'text-delta') handle.cancel();
      if (event.type === 'run-end') resolve(labels);
    });
  });

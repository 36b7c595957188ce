// A CommonJS consumer of the built package's types (moduleResolution node16: the `require`
// condition's .d.cts declarations), compiled by spec/dist/package.spec.ts.
import { z } from 'zod';
import type { Observable } from 'rxjs';
import { createAgent, defineTool, ofType, type AgentEvent } from 'rx-agent';
import { modelRetry, permissions } from 'rx-agent/operators';
import { scriptedModel } from 'rx-agent/testing';

const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({ text: z.string() }), execute: ({ text }) => text.length });
const agent = createAgent({ model: scriptedModel(['hi']), tools: [echo], middleware: [modelRetry(), permissions()] });
const events$: Observable<AgentEvent> = agent.run('hi');
events$.pipe(ofType('text-delta', 'run-end')).subscribe((e) => (e.type === 'run-end' ? e.reason : e.text));
export const reason: Promise<string> = agent.invoke('hi').then((r) => r.reason);

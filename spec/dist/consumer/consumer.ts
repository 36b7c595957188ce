// A consumer of the built package's types: compiled against dist/types by spec/dist/package.spec.ts.
import { z } from 'zod';
import type { Observable } from 'rxjs';
import { createAgent, defineTool, ofType, type AgentEvent } from 'rx-agent';
import { modelRetry, permissions, PiiDetectedError } from 'rx-agent/operators';
import { scriptedModel } from 'rx-agent/testing';

declare module 'rx-agent' {
  interface AgentEventMap {
    'audit-logged': { entry: string };
  }
}

const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({ text: z.string() }), execute: ({ text }) => text.length });
const agent = createAgent({ model: scriptedModel(['hi']), tools: [echo], middleware: [modelRetry(), permissions()] });
const events$: Observable<AgentEvent> = agent.run('hi');
events$.pipe(ofType('audit-logged')).subscribe((e) => e.entry.toUpperCase());
events$.pipe(ofType('text-delta', 'run-end')).subscribe((e) => (e.type === 'run-end' ? e.reason : e.text));
export const blocked: string = new PiiDetectedError('email').piiType;

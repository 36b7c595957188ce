// A consumer of the built package's types: compiled against dist/types by spec/dist/package.spec.ts.
import { z } from 'zod';
import type { Observable } from 'rxjs';
import { createAgent, defineTool, ofType, type AgentEvent, type AgentResponse } from 'rx-agent';
import { modelRetry, permissions, PiiDetectedError } from 'rx-agent/operators';
import { scriptedModel } from 'rx-agent/testing';

declare module 'rx-agent' {
  interface AgentEventMap {
    'audit-logged': { entry: string };
  }
  interface AgentResponseMap {
    'go-on-response': { approved: boolean };
  }
}

const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({ text: z.string() }), execute: ({ text }) => text.length });
const agent = createAgent({ model: scriptedModel(['hi']), tools: [echo], middleware: [modelRetry(), permissions()] });
const events$: Observable<AgentEvent> = agent.run('hi');
events$.pipe(ofType('audit-logged')).subscribe((e) => e.entry.toUpperCase());
events$.pipe(ofType('text-delta', 'run-end')).subscribe((e) => (e.type === 'run-end' ? e.reason : e.text));
export const blocked: string = new PiiDetectedError('email').piiType;

// Responses: the declared ones fit and narrow by `type`; an undeclared type or a missing field does not compile.
const handle = agent.start('hi');
handle.respond({ type: 'go-on-response', requestId: 'r1', approved: true });
handle.respond({ type: 'permission-response', requestId: 'r2', approved: false, remember: 'never' });
// @ts-expect-error 'no-such-response' is not in AgentResponseMap
handle.respond({ type: 'no-such-response', requestId: 'r3' });
// @ts-expect-error a permission-response needs `approved`
handle.respond({ type: 'permission-response', requestId: 'r4' });
export const extension = (r: AgentResponse): number | undefined => (r.type === 'continuation-response' ? r.extension : undefined);

/**
 * S3 memory: M concurrent runs of ONE agent (with the five operators), each suspended (a) inside a
 * tool whose promise the bench releases later, (b) on a permission request (operators/permissions.ts,
 * needsApproval). After a forced GC: heap bytes per suspended run. Then all are released and must
 * complete.
 */
import { setImmediate as tick } from 'node:timers/promises';
import { Subject } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentMiddleware, type AgentResponse, type RunHandle } from '../../src/index';
import { check, fullGc, median } from '../lib/harness';
import { S3_FINAL_TEXT, s3Model } from '../lib/fakeModel';

export const M = 2_000;
const RUNS = 5;

async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`CHECK FAILED: ${what} (timed out after ${ms} ms)`);
    await tick();
  }
}

function heap(): number {
  return process.memoryUsage().heapUsed;
}

interface Tally {
  completed: number;
  wrong: string | undefined;
}

/**
 * An observer that checks each run ends `completed` with the final text after one tool result,
 * with exactly one `run-end`, and counts the run once its Observable completes.
 */
function observer(tally: Tally, onEvent?: (e: AgentEvent) => void) {
  let toolResults = 0;
  let ended = false;
  return {
    next(e: AgentEvent) {
      if (e.type === 'tool-result') {
        toolResults++;
        if (e.isError) tally.wrong ??= `tool error result: ${JSON.stringify(e.result)}`;
      } else if (e.type === 'run-end') {
        if (ended) tally.wrong ??= 'a second run-end in one run';
        ended = true;
        if (e.reason !== 'completed' || e.text !== S3_FINAL_TEXT || toolResults !== 1) {
          tally.wrong ??= `run-end ${e.reason} '${e.text}' after ${toolResults} tool results`;
        }
      } else if (e.type === 'error') tally.wrong ??= `error event ${JSON.stringify(e.error)}`;
      onEvent?.(e);
    },
    error(err: unknown) {
      tally.wrong ??= `Observable error ${String(err)}`;
    },
    complete() {
      if (ended) tally.completed++;
      else tally.wrong ??= 'a run completed without a run-end';
    },
  };
}

/** Bytes per run suspended in a tool whose promise is held by the bench. */
async function suspendedInTool(middleware: readonly AgentMiddleware[]): Promise<number> {
  let holds: Array<(value: string) => void> = [];
  const hold = defineTool({
    name: 'hold',
    description: 'Waits until released',
    parameters: z.object({}),
    execute: () => new Promise<string>((resolve) => holds.push(resolve)),
  });
  const agent = createAgent({ model: s3Model('hold'), tools: [hold], middleware });
  const tally: Tally = { completed: 0, wrong: undefined };
  await fullGc();
  const before = heap();
  for (let i = 0; i < M; i++) agent.run('Wait for me').subscribe(observer(tally));
  await waitFor(() => holds.length === M || tally.wrong !== undefined, 20_000, `S3: ${M} runs reaching the tool (got ${holds.length})`);
  check(tally.wrong === undefined, `S3 tool: ${tally.wrong}`);
  await fullGc();
  const after = heap();
  check(tally.completed === 0, `S3 tool: ${tally.completed} runs completed before release`);
  const release = holds;
  holds = [];
  for (const resolve of release) resolve('ok');
  await waitFor(() => tally.completed === M || tally.wrong !== undefined, 20_000, `S3 tool: all ${M} runs completing (got ${tally.completed})`);
  check(tally.wrong === undefined, `S3 tool after release: ${tally.wrong}`);
  return (after - before) / M;
}

/** Bytes per run waiting on a permission request. */
async function waitingForPermission(middleware: readonly AgentMiddleware[]): Promise<number> {
  let executed = 0;
  const guarded = defineTool({
    name: 'guarded',
    description: 'Needs approval',
    parameters: z.object({}),
    needsApproval: true,
    execute: () => {
      executed++;
      return 'ok';
    },
  });
  const agent = createAgent({ model: s3Model('guarded'), tools: [guarded], middleware });
  const responses = new Subject<AgentResponse>(); // one Subject shared by every run (least bench overhead)
  let requestIds: string[] = [];
  const tally: Tally = { completed: 0, wrong: undefined };
  await fullGc();
  const before = heap();
  for (let i = 0; i < M; i++) {
    agent.run('Ask first', { responses }).subscribe(
      observer(tally, (e) => {
        if (e.type === 'permission-request') requestIds.push(e.requestId);
      }),
    );
  }
  await waitFor(() => requestIds.length === M || tally.wrong !== undefined, 20_000, `S3: ${M} permission requests (got ${requestIds.length})`);
  check(tally.wrong === undefined, `S3 permission: ${tally.wrong}`);
  await fullGc();
  const after = heap();
  check(executed === 0 && tally.completed === 0, `S3 permission: ${executed} tools ran before approval`);
  const ids = requestIds;
  requestIds = [];
  for (const requestId of ids) responses.next({ type: 'permission-response', requestId, approved: true });
  await waitFor(() => tally.completed === M || tally.wrong !== undefined, 20_000, `S3 permission: all ${M} runs completing (got ${tally.completed})`);
  check(tally.wrong === undefined, `S3 permission after approval: ${tally.wrong}`);
  check((executed as number) === M, `S3 permission: ${executed} tools ran, expected ${M}`);
  return (after - before) / M;
}

/** Bytes per run waiting on a permission request, started with `agent.start()` and answered with `respond()`. */
async function startedWaitingForPermission(middleware: readonly AgentMiddleware[]): Promise<number> {
  let executed = 0;
  const guarded = defineTool({
    name: 'guarded',
    description: 'Needs approval',
    parameters: z.object({}),
    needsApproval: true,
    execute: () => {
      executed++;
      return 'ok';
    },
  });
  const agent = createAgent({ model: s3Model('guarded'), tools: [guarded], middleware });
  let waiting: Array<{ handle: RunHandle; requestId: string }> = [];
  const tally: Tally = { completed: 0, wrong: undefined };
  await fullGc();
  const before = heap();
  for (let i = 0; i < M; i++) {
    const handle = agent.start('Ask first');
    handle.events$.subscribe(
      observer(tally, (e) => {
        if (e.type === 'permission-request') waiting.push({ handle, requestId: e.requestId });
      }),
    );
  }
  await waitFor(() => waiting.length === M || tally.wrong !== undefined, 20_000, `S3 start(): ${M} permission requests (got ${waiting.length})`);
  check(tally.wrong === undefined, `S3 start(): ${tally.wrong}`);
  await fullGc();
  const after = heap();
  check(executed === 0 && tally.completed === 0, `S3 start(): ${executed} tools ran before approval`);
  const all = waiting;
  waiting = [];
  for (const { handle, requestId } of all) check(handle.respond({ type: 'permission-response', requestId, approved: true }), 'S3 start(): respond() refused');
  await waitFor(() => tally.completed === M || tally.wrong !== undefined, 20_000, `S3 start(): all ${M} runs completing (got ${tally.completed})`);
  check(tally.wrong === undefined, `S3 start() after approval: ${tally.wrong}`);
  check((executed as number) === M, `S3 start(): ${executed} tools ran, expected ${M}`);
  return (after - before) / M;
}

/** What the bench itself keeps per suspended run in (a): a pending Promise and its resolver in an array. */
async function harnessBaseline(): Promise<number> {
  await fullGc();
  const before = heap();
  const holds: Array<(v: string) => void> = [];
  for (let i = 0; i < M; i++) void new Promise<string>((resolve) => holds.push(resolve));
  await fullGc();
  const after = heap();
  holds.forEach((r) => r('ok'));
  return (after - before) / M;
}

export interface S3Result {
  readonly bytesPerSuspendedRun: number;
  readonly bytesPerPermissionWait: number;
  /** Waiting on a permission request, through `agent.start()` and `respond()`. */
  readonly bytesPerStartedPermissionWait: number;
  readonly harnessBytesPerRun: number;
  readonly samples: { tool: number[]; permission: number[]; started: number[] };
}

export async function runS3(middleware: readonly AgentMiddleware[], permissions: AgentMiddleware): Promise<S3Result> {
  const withPermissions = [...middleware, permissions];
  await suspendedInTool(middleware); // warm-up
  await waitingForPermission(withPermissions);
  await startedWaitingForPermission(withPermissions);
  const tool: number[] = [];
  const permission: number[] = [];
  const started: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    tool.push(await suspendedInTool(middleware));
    permission.push(await waitingForPermission(withPermissions));
    started.push(await startedWaitingForPermission(withPermissions));
  }
  return {
    bytesPerSuspendedRun: median(tool),
    bytesPerPermissionWait: median(permission),
    bytesPerStartedPermissionWait: median(started),
    harnessBytesPerRun: await harnessBaseline(),
    samples: { tool, permission, started },
  };
}

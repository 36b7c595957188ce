/**
 * The operators the workloads run with (the five of the issue, plus permissions for S3).
 */
import type { AgentMiddleware } from '../../src/index';
import { costBudget, iterationLogging, modelRetry, modelTimeout, permissions, piiRedaction } from '../../operators/index';

export interface LoadedOperator {
  readonly name: string;
  readonly middleware: AgentMiddleware;
}

const silentLogger = { info(_line: string) {}, debug(_line: string) {}, trace(_line: string) {} };

/** Pricing given to costBudget: large budget, so it records cost every call and never terminates. */
export const COST_OPTIONS = { maxCost: 1e9, pricing: { inputPerToken: 1e-6, outputPerToken: 2e-6 } };
export const PII_OPTIONS = { applyToOutput: true };

/** The five operators of S1/S2/S3/abort, in registration order. */
export function loadFiveOperators(): LoadedOperator[] {
  return [
    { name: 'iterationLogging', middleware: iterationLogging({ logger: silentLogger }) },
    { name: 'modelRetry', middleware: modelRetry() },
    { name: 'modelTimeout', middleware: modelTimeout() },
    { name: 'piiRedaction', middleware: piiRedaction(PII_OPTIONS) },
    { name: 'costBudget', middleware: costBudget(COST_OPTIONS) },
  ];
}

/** permissions(), for S3's second workload. */
export function loadPermissions(): LoadedOperator {
  return { name: 'permissions', middleware: permissions() };
}

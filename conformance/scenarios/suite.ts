/**
 * The conformance suite's scenario contract, as its `src/types.ts` and
 * `src/connection/index.ts` define it (@modelcontextprotocol/conformance
 * 0.2.0-alpha.12).  The published package ships only a bundle, so these
 * declarations are copied here, trimmed to what the cancellation scenarios
 * use; upstream, `cancellation.ts` imports them from `../../types` and
 * `../../connection` instead (see docs/upstream/conformance-cancellation.md).
 */

export type CheckStatus = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';

export interface SpecReference {
  id: string;
  url?: string;
}

export type SpecVersion = '2025-03-26' | '2025-06-18' | '2025-11-25' | '2026-07-28';

export type ScenarioSource =
  | { introducedIn: SpecVersion; removedIn?: SpecVersion }
  | { extensionId: 'io.modelcontextprotocol/tasks' };

export interface ConformanceCheck {
  id: string;
  name: string;
  description: string;
  status: CheckStatus;
  timestamp: string;
  specReferences?: SpecReference[];
  details?: Record<string, unknown>;
  errorMessage?: string;
}

/** What the suite's runner hands `ClientScenario.run()` (its `connect()` is not needed here). */
export interface RunContext {
  serverUrl: string;
  specVersion: SpecVersion;
}

export interface ClientScenario {
  name: string;
  description: string;
  source: ScenarioSource;
  run(ctx: RunContext): Promise<ConformanceCheck[]>;
}

/** The spec versions that keep the stateful lifecycle (initialize, Mcp-Session-Id). */
export function isStateless(ctx: Pick<RunContext, 'specVersion'>): boolean {
  return !['2025-03-26', '2025-06-18', '2025-11-25'].includes(ctx.specVersion);
}

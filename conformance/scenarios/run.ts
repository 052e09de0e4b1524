/**
 * Run our scenarios the way `conformance server` runs its own: against a
 * server URL at one spec version, printing the suite's summary lines and
 * writing `<out>/server-<scenario>-<timestamp>/checks.json`.
 *
 *   node conformance/scenarios/run.ts --url http://127.0.0.1:3000/mcp \
 *     --spec-version 2025-11-25 [--scenario NAME] [-o DIR] [--strict]
 *
 * The published suite has no way to load scenarios from outside its bundle,
 * hence this runner.  Node 22 runs the TypeScript as is (type stripping).
 * Scenarios not applicable at the version are skipped, as the suite does;
 * Tasks-extension ones run at 2026-07-28.  Exit status 1 when a check
 * fails (with --strict: or warns).
 */

import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { cancellationScenarios } from './cancellation.ts';
import type { ClientScenario, SpecVersion } from './suite.ts';

const TIMELINE: SpecVersion[] = ['2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28'];

function applies(scenario: ClientScenario, version: SpecVersion): boolean {
  const source = scenario.source;
  if ('extensionId' in source) return version === '2026-07-28';
  const at = TIMELINE.indexOf(version);
  return (
    at >= TIMELINE.indexOf(source.introducedIn) &&
    (source.removedIn === undefined || at < TIMELINE.indexOf(source.removedIn))
  );
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      'spec-version': { type: 'string', default: '2026-07-28' },
      scenario: { type: 'string' },
      output: { type: 'string', short: 'o', default: 'results' },
      strict: { type: 'boolean', default: false },
      list: { type: 'boolean', default: false }
    }
  });
  if (values.list) {
    for (const scenario of cancellationScenarios) console.log(`${scenario.name}`);
    return 0;
  }
  const version = values['spec-version'] as SpecVersion;
  if (!values.url || !TIMELINE.includes(version)) {
    console.error('usage: run.ts --url URL [--spec-version VERSION] [--scenario NAME] [-o DIR] [--strict]');
    return 2;
  }
  const chosen = cancellationScenarios.filter(
    (s) => (values.scenario ? s.name === values.scenario : true) && applies(s, version)
  );
  let passed = 0;
  let failed = 0;
  let warned = 0;
  for (const scenario of chosen) {
    const checks = await scenario.run({ serverUrl: values.url, specVersion: version });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const dir = path.join(values.output!, `server-${scenario.name}-${stamp}`);
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'checks.json'), JSON.stringify(checks, null, 2));
    const ok = checks.filter((c) => c.status === 'SUCCESS').length;
    const bad = checks.filter((c) => c.status === 'FAILURE').length;
    const warn = checks.filter((c) => c.status === 'WARNING').length;
    passed += ok;
    failed += bad;
    warned += warn;
    const mark = bad === 0 && (!values.strict || warn === 0) ? '✓' : '✗';
    console.log(`${mark} ${scenario.name}: ${ok} passed, ${bad} failed, ${warn} warnings`);
    for (const c of checks) {
      if (c.status !== 'SUCCESS') console.log(`    ${c.status} ${c.id}: ${c.errorMessage ?? ''}`);
    }
  }
  console.log(`${version} cancellation scenarios: ${passed} checks pass, ${failed} fail, ${warned} warn`);
  return failed > 0 || (values.strict && warned > 0) ? 1 : 0;
}

process.exitCode = await main();

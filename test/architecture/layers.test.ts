/**
 * The code's layers (`.dependency-cruiser.cjs`, docs/architecture.md "Layers"): each imports only the layers below
 * it, the ledger never the sink, no import cycle, and Lambda handlers only in `functions/`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cruise, type ICruiseResult, type IViolation } from 'dependency-cruiser';
import { beforeAll, describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
const ROOTS = ['shared', 'functions', 'cli', 'infra', 'local'];

function describeViolation(violation: IViolation): string {
  const cycle = violation.cycle?.map((step) => step.name).join(' → ');
  return `${violation.rule.name}: ${violation.from} → ${cycle ?? violation.to}`;
}

describe('layers', () => {
  let result: ICruiseResult;

  beforeAll(async () => {
    const config = require('../../.dependency-cruiser.cjs');
    const reported = await cruise(ROOTS, { validate: true, ruleSet: config, ...config.options });
    result = reported.output as ICruiseResult;
  }, 120_000);

  it('reads every source file of every layer', () => {
    const read = new Set(result.modules.map((module) => module.source));
    for (const file of [
      'shared/errors.ts',
      'shared/ledger/layout.ts',
      'shared/processor/processor.ts',
      'cli/eos.ts',
    ]) {
      expect(read).toContain(file);
    }
  });

  it('has no import that runs up a layer, from the ledger to the sink, or round a cycle', () => {
    expect(result.summary.violations.map(describeViolation)).toEqual([]);
  });

  it('refuses an upward import, a ledger-to-sink import and a cycle when it meets them (the rules bite)', async () => {
    const config = require('../../.dependency-cruiser.cjs');
    const probe = await cruise(['shared'], {
      validate: true,
      ruleSet: config,
      baseDir: 'test/architecture/fixtures',
      tsPreCompilationDeps: true,
      enhancedResolveOptions: config.options.enhancedResolveOptions,
    });
    const names = new Set((probe.output as ICruiseResult).summary.violations.map((v) => v.rule.name));
    expect([...names].sort()).toEqual(['base-imports-upward', 'ledger-imports-sink', 'no-cycle']);
  });

  it('keeps Lambda handlers in functions/', () => {
    const sources = readdirSync('shared', { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.ts'),
    );
    const outside = sources.filter((file) =>
      /^export (const|async function|function) handler\b/m.test(readFileSync(`shared/${file}`, 'utf8')),
    );
    expect(outside).toEqual([]);
  });
});

/**
 * The generated pages stay in step with their sources: docs/configuration.md with the settings definitions
 * (scripts/docs-configuration.ts), docs/benchmark.md with the benchmark's figures and bench/report.ts; and
 * operations.md explains every metric the pipeline emits.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_KEYS } from '../../infra/config.ts';
import { BENCHMARK_PAGE, renderBenchmarkPage } from '../../scripts/docs-benchmark.ts';
import {
  CONFIGURATION_PAGE,
  renderConfigurationPage,
  settingsWithoutDescription,
  staleDescriptions,
} from '../../scripts/docs-configuration.ts';
import { ENV_NAMES } from '../../shared/config/settings.ts';
import { METRIC } from '../../shared/observability/names.ts';

describe('docs/configuration.md', () => {
  it('describes every setting of settings.ts and infra/config.ts', () => {
    const missing = settingsWithoutDescription();
    expect(
      missing,
      `add a description to SETTING_DESCRIPTIONS in scripts/docs-configuration.ts for: ${missing.join(', ')}`,
    ).toEqual([]);
  });

  it('keeps no description of a setting that no longer exists', () => {
    expect(staleDescriptions()).toEqual([]);
  });

  it('is what the generator writes now (run `npx tsx scripts/docs-configuration.ts` when this fails)', async () => {
    const page = await renderConfigurationPage();
    expect(readFileSync(CONFIGURATION_PAGE, 'utf8')).toBe(page);
  });

  it('names every environment variable and context key', async () => {
    const page = await renderConfigurationPage();
    for (const name of Object.values(ENV_NAMES)) expect(page).toContain(`\`${name}\``);
    for (const key of CONFIG_KEYS) expect(page).toContain(`\`-c ${key}\``);
    expect(page).not.toContain('(no description)');
  });

  it('lists every eos flag with the default a user without EOS_* variables sees', async () => {
    const saved = process.env.EOS_BUCKET;
    process.env.EOS_BUCKET = 'a-bucket-of-whoever-generates-the-page';
    try {
      const page = await renderConfigurationPage();
      expect(page).not.toContain('a-bucket-of-whoever-generates-the-page');
      for (const flag of [
        '--records <n>',
        '--faults <spec>',
        '--bucket <name>',
        '--stream <stream>',
        '--table <name>',
      ]) {
        expect(page).toContain(`\`${flag}\``);
      }
    } finally {
      if (saved === undefined) delete process.env.EOS_BUCKET;
      else process.env.EOS_BUCKET = saved;
    }
  });
});

describe('docs/operations.md', () => {
  it('explains every metric the pipeline emits', () => {
    const page = readFileSync(join(CONFIGURATION_PAGE, '..', 'operations.md'), 'utf8');
    const missing = Object.values(METRIC).filter((name) => !page.includes(`\`${name}\``));
    expect(missing, `metrics missing from docs/operations.md: ${missing.join(', ')}`).toEqual([]);
  });
});

describe('docs/benchmark.md', () => {
  it('is what bench/report.ts renders from bench/results.json (run `npx tsx scripts/docs-benchmark.ts`)', () => {
    expect(readFileSync(BENCHMARK_PAGE, 'utf8')).toBe(renderBenchmarkPage());
  });
});

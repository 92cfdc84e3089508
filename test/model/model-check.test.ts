/**
 * Runs the model checker the way CI does (scripts/model-check.mjs): the model must pass exhaustively within its
 * bounds and every listed mutation must be caught. SPIN and a C compiler are required, not optional: without
 * them this test fails and says how to install them (.ci/run installs both).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

describe('the commit protocol model (SPIN)', () => {
  it('spin and a C compiler are installed', () => {
    const spin = spawnSync('spin', ['-V'], { encoding: 'utf8' });
    const cc = spawnSync('cc', ['--version'], { encoding: 'utf8' });
    expect(spin.error, 'spin is missing: apt-get install -y spin (.ci/run installs it)').toBeUndefined();
    expect(cc.error, 'cc is missing: apt-get install -y gcc (.ci/run installs it)').toBeUndefined();
  });

  it('passes within its bounds and catches every mutation of mutations.txt', () => {
    const run = spawnSync('node', [join(root, 'scripts', 'model-check.mjs')], {
      encoding: 'utf8',
      timeout: 900_000,
    });
    const output = `${run.stdout}${run.stderr}`;
    expect(output, output).toMatch(/model-check: \d+ states explored in all/);
    const [, total, caught] = /model-check: (\d+) mutations, (\d+) caught/.exec(output) ?? [];
    expect(Number(total), output).toBeGreaterThan(0);
    expect(caught, output).toBe(total);
    expect(run.status, output).toBe(0);
  }, 900_000);
});

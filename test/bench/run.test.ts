/** `npm run bench`'s section choice: `--only` reruns named sections, and a wrong name is one line naming the choices. */
import { describe, expect, it } from 'vitest';
import { sectionsToRun } from '../../bench/run.ts';

describe('bench sections', () => {
  it('runs every section in order without --only', () => {
    expect(sectionsToRun([])).toEqual(['throughput', 'checkpoints', 'cost', 'startup', 'e2e', 'first-run']);
  });

  it('runs only the named sections with --only', () => {
    expect(sectionsToRun(['--only', 'e2e,cost'])).toEqual(['e2e', 'cost']);
  });

  it('refuses an unknown or missing section name, naming the sections', () => {
    expect(() => sectionsToRun(['--only', 'e2e,bogus'])).toThrow(
      '--only takes sections from throughput, checkpoints, cost, startup, e2e, first-run: unknown bogus',
    );
    expect(() => sectionsToRun(['--only'])).toThrow(/^--only takes sections from/);
  });
});

/**
 * A transform module outside this package (the user's repository, with nothing installed beside it): the construct's
 * synth-time checks resolve it, and the processor bundle holds it, with `msk-exactly-once-pipeline/transform` taken
 * from this package — the same module the processor checks definitions against.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveTransform, writeProcessorEntry } from '../../infra/transform-entry.ts';
import { bundleHandler } from '../../scripts/bundle.mjs';

const MARKER = 'outside-transform-4b1e';

describe('a transform module outside the package', { timeout: 120_000 }, () => {
  it('passes the synth checks and is bundled into the processor', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eos-user-app-'));
    expect(dir.startsWith(resolve('.'))).toBe(false);
    const file = join(dir, 'readings.ts');
    writeFileSync(
      file,
      `import { defineTransform } from 'msk-exactly-once-pipeline/transform';
export const readings = defineTransform({
  name: '${MARKER}',
  value: { format: 'json' },
  schema: { seen: 'boolean' },
  transform: () => ({ rows: [{ seen: true }] }),
});
`,
    );
    const module = resolveTransform({ kind: 'module', entry: file, exportName: 'readings' }, dir);
    expect(module).toMatchObject({ file, exportName: 'readings' });
    const out = mkdtempSync(join(tmpdir(), 'eos-user-bundle-'));
    const index = await bundleHandler(writeProcessorEntry(module!), out);
    expect(readFileSync(index, 'utf8')).toContain(MARKER);
  });
});

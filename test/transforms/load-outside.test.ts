/**
 * A user's transform lives in the user's repository, not in this package: loaded by path from a folder outside the
 * package, with nothing installed there, it still finds the transform API, whether tsx compiles it as CommonJS (no
 * package.json beside it) or as an ES module; and an import that does not resolve there fails in one line naming
 * the module and what to install. Each case runs in a fresh Node process with tsx's loaders registered as
 * `bin/eos.mjs` registers them (vitest's own module runner would hide how Node resolves).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const LOADERS = pathToFileURL(join(ROOT, 'bin', 'tsx-loaders.mjs')).href;

const TRANSFORM = `import { defineTransform, RejectRecord } from 'msk-exactly-once-pipeline/transform';
export default defineTransform({
  name: 'outside',
  value: { format: 'json' },
  schema: { seen: 'boolean' },
  transform({ value }) {
    if (value === null) throw new RejectRecord('no value');
    return { rows: [{ seen: true }] };
  },
});
`;

/** A folder outside the package holding `files`; returns its path. */
function folder(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'eos-transform-'));
  expect(dir.startsWith(ROOT)).toBe(false);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

/** Loads `file` with loadTransform in a fresh process; its stdout (the transform's name) or its error's message. */
async function loadInProcess(file: string): Promise<{ ok: boolean; out: string }> {
  const script = join(dirname(file), 'load.mjs');
  const load = pathToFileURL(join(ROOT, 'shared', 'transforms', 'load.ts')).href;
  writeFileSync(
    script,
    `await import('${LOADERS}');
const { loadTransform } = await import('${load}');
try {
  const loaded = await loadTransform(process.argv[2]);
  process.stdout.write(loaded.definition.name);
} catch (error) {
  process.stdout.write('ERROR ' + error.constructor.name + ': ' + error.message);
}
`,
  );
  const { stdout } = await promisify(execFile)(process.execPath, [script, file], {
    cwd: dirname(file),
    timeout: 60_000,
  });
  return { ok: !stdout.startsWith('ERROR '), out: stdout };
}

describe('a transform outside the package', { timeout: 90_000 }, () => {
  it('loads from a folder with nothing installed and no package.json (compiled as CommonJS)', async () => {
    const dir = folder({ 'outside.ts': TRANSFORM });
    expect(await loadInProcess(join(dir, 'outside.ts'))).toEqual({ ok: true, out: 'outside' });
  });

  it('loads from a folder with no package.json when it imports a module of its own beside it', async () => {
    const dir = folder({
      'base.ts': TRANSFORM,
      'outside.ts': `import base from './base.ts';\nimport { defineTransform } from 'msk-exactly-once-pipeline/transform';\nexport default defineTransform({ ...base, name: 'wrapped' });\n`,
    });
    expect(await loadInProcess(join(dir, 'outside.ts'))).toEqual({ ok: true, out: 'wrapped' });
  });

  it('loads from a folder whose package.json says it is an ES module', async () => {
    const dir = folder({ 'outside.ts': TRANSFORM, 'package.json': '{"type":"module"}' });
    expect(await loadInProcess(join(dir, 'outside.ts'))).toEqual({ ok: true, out: 'outside' });
  });

  it('names an import that does not resolve there, and what to install, in one line', async () => {
    const dir = folder({
      'outside.ts': `import pad from 'left-pad-not-installed';\n${TRANSFORM.replace('seen: true', 'seen: pad')}`,
    });
    const file = join(dir, 'outside.ts');
    const { ok, out } = await loadInProcess(file);
    expect(ok).toBe(false);
    expect(out).toBe(
      `ERROR TransformDependencyMissingError: transform module ${file} imports 'left-pad-not-installed', which does not resolve from its folder: install it there (npm install left-pad-not-installed) or import it by a relative path`,
    );
  });
});

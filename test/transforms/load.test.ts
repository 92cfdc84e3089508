/**
 * `loadTransform`: built-ins by name, user modules by path with an optional export, and a named error for every
 * way a reference can be wrong (what was looked for, what was found), raised when loading, never per record.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  NotATransformError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../../shared/errors.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import { InvalidTransformDefinitionError } from '../../shared/transforms/api.ts';
import { loadTransform, parseTransformRef } from '../../shared/transforms/load.ts';
import { mskRecord } from '../support/msk.ts';

const fixtures = fileURLToPath(new URL('../fixtures/transforms/', import.meta.url));
const fixture = (name: string) => resolve(fixtures, name);

async function failure(ref: string, cwd?: string): Promise<unknown> {
  try {
    await loadTransform(ref, cwd);
  } catch (error) {
    return error;
  }
  throw new Error(`loadTransform(${ref}) did not fail`);
}

describe('transform references', () => {
  it('a bare name is a built-in; a path or a module extension is a module, with an optional #export', () => {
    expect(parseTransformRef('orders')).toEqual({ kind: 'builtin', name: 'orders' });
    expect(parseTransformRef('./t.ts')).toEqual({ kind: 'module', path: './t.ts', exportName: undefined });
    expect(parseTransformRef('t.mjs#clicks')).toEqual({
      kind: 'module',
      path: 't.mjs',
      exportName: 'clicks',
    });
    expect(parseTransformRef('/abs/dir/t#x')).toEqual({
      kind: 'module',
      path: '/abs/dir/t',
      exportName: 'x',
    });
  });
});

describe('loadTransform', () => {
  it('loads the built-ins by name', async () => {
    for (const name of ['orders', 'passthrough']) {
      const loaded = await loadTransform(name);
      expect(loaded.definition.name).toBe(name);
      expect(loaded.transform.name).toBe(name);
      expect(loaded.file).toBeUndefined();
    }
  });

  it('an unknown built-in names itself and lists the known ones', async () => {
    const error = await failure('ordres');
    expect(error).toBeInstanceOf(UnknownTransformError);
    expect((error as UnknownTransformError).known).toEqual(['orders', 'passthrough']);
    expect((error as Error).message).toMatch(
      /unknown transform "ordres": not a built-in \(known: orders, passthrough\)/,
    );
  });

  it("a user module's default export, by absolute path or relative to cwd, runs as the processor's transform", async () => {
    const absolute = await loadTransform(fixture('clicks.ts'));
    expect(absolute).toMatchObject({ file: fixture('clicks.ts'), exportName: 'default' });
    expect(absolute.definition.name).toBe('clicks');
    const relative = await loadTransform('./clicks.ts', fixtures);
    expect(relative.definition).toBe(absolute.definition);
    const record = decodeRecord(
      mskRecord({ partition: 0, offset: 1, value: '{"viewId":"v1","userId":"u1","page":"/","at":0}' }),
    );
    expect(relative.transform.apply(record)).toMatchObject({
      kind: 'ok',
      rows: [{ userId: 'u1', page: '/', at: 0, day: '1970-01-01', referrer: null }],
      idempotencyKey: 'v1',
    });
  });

  it('without a default export, the only export made by defineTransform', async () => {
    const loaded = await loadTransform(fixture('named-only.ts'));
    expect(loaded.exportName).toBe('upper');
    expect(loaded.definition.name).toBe('upper');
  });

  it('a named export by #name', async () => {
    const loaded = await loadTransform(`${fixture('two-transforms.ts')}#second`);
    expect(loaded).toMatchObject({ exportName: 'second', definition: { name: 'second' } });
  });

  it('a missing file names the resolved path', async () => {
    const error = await failure('./nope/missing.ts', fixtures);
    expect(error).toBeInstanceOf(TransformModuleNotFoundError);
    expect((error as TransformModuleNotFoundError).path).toBe(fixture('nope/missing.ts'));
    expect((error as Error).message).toBe(`transform module not found: ${fixture('nope/missing.ts')}`);
  });

  it('a missing export lists the exports found', async () => {
    const error = await failure(`${fixture('two-transforms.ts')}#third`);
    expect(error).toBeInstanceOf(TransformExportMissingError);
    expect((error as Error).message).toMatch(/has no export "third" \(exports: first, helper, second\)/);
  });

  it('several transforms and no default, without #export: says so and lists them', async () => {
    const error = await failure(fixture('two-transforms.ts'));
    expect(error).toBeInstanceOf(TransformExportMissingError);
    expect((error as Error).message).toMatch(
      /no default export and no single export made by defineTransform \(exports: first, helper, second\)/,
    );
  });

  it('an export not made by defineTransform says what it is', async () => {
    const byDefault = await failure(fixture('not-a-transform.ts'));
    expect(byDefault).toBeInstanceOf(NotATransformError);
    expect((byDefault as Error).message).toMatch(
      /export "default" of .*not-a-transform\.ts is not a transform made by defineTransform \(it is an object\)/,
    );
    const named = await failure(`${fixture('two-transforms.ts')}#helper`);
    expect((named as Error).message).toMatch(/export "helper" .* \(it is a function\)/);
  });

  it('a module whose definition is invalid fails with the definition error', async () => {
    const error = await failure(fixture('invalid-definition.ts'));
    expect(error).toBeInstanceOf(InvalidTransformDefinitionError);
    expect((error as Error).message).toMatch(/transform "bad-schema": column "source" is reserved/);
  });
});

/**
 * The processor's code for a transform setting, decided at synth. A built-in runs in the stock processor
 * (`functions/processor.ts`, which reads `EOS_TRANSFORM`). A user's module gets a generated entry that imports
 * the module's export statically and hands it to the processor's handler factory, and is bundled like every
 * function (`bundled-function.ts`): the transform is inside the bundle, nothing is looked up at cold start.
 *
 * Everything that can be wrong with the setting fails here, at synth, with the named errors `eos local` raises for
 * the same setting: an unknown built-in (listing the known ones), a module file that does not exist (its resolved
 * path), an export the module does not have (listing the exports it has). The exports are read by esbuild from the
 * module's source, without running it: the check needs no TypeScript loader in the CDK app.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSync } from 'esbuild';
import {
  InvalidSettingError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../shared/errors.ts';
import { BUILTIN_TRANSFORMS } from '../shared/transforms/registry.ts';
import type { TransformChoice } from './config.ts';

export const DEFAULT_PROCESSOR_ENTRY = fileURLToPath(new URL('../functions/processor.ts', import.meta.url));
/** The module exporting `createProcessorHandler({ transform })`: the processor Lambda around a given transform. */
export const PROCESSOR_HANDLER_FACTORY = fileURLToPath(
  new URL('../functions/processor-handler.ts', import.meta.url),
);
const FACTORY_NAME = 'createProcessorHandler';

/** A transform module resolved and checked: its absolute path and the export to run. */
export interface ResolvedTransformModule {
  readonly file: string;
  readonly exportName: string;
}

/** The names a module exports, as esbuild reads them from its source (the module is not run). */
export function moduleExports(file: string): string[] {
  const result = buildSync({
    entryPoints: [file],
    bundle: true,
    write: false,
    metafile: true,
    format: 'esm',
    platform: 'node',
    // Only this module's own export list is wanted: its imports need not be resolvable here.
    packages: 'external',
    logLevel: 'silent',
  });
  const outputs = Object.values(result.metafile?.outputs ?? {});
  return [...(outputs[0]?.exports ?? [])].sort();
}

/**
 * Checks a built-in's name; resolves a module (relative to `cwd`, the CDK app's directory) and the export to run:
 * `#name` when given; else `default`; else the module's only export.
 */
export function resolveTransform(
  choice: TransformChoice,
  cwd: string = process.cwd(),
): ResolvedTransformModule | undefined {
  if (choice.kind === 'built-in') {
    if (!Object.hasOwn(BUILTIN_TRANSFORMS, choice.name)) {
      throw new UnknownTransformError(choice.name, Object.keys(BUILTIN_TRANSFORMS));
    }
    return undefined;
  }
  const file = resolve(cwd, choice.entry);
  if (!existsSync(file)) throw new TransformModuleNotFoundError(file);
  let exported: string[];
  try {
    exported = moduleExports(file);
  } catch (error) {
    // esbuild's own message names the file, line and problem (a syntax error, say).
    throw new InvalidSettingError('transform', `cannot read module ${file}: ${(error as Error).message}`);
  }
  if (choice.exportName !== undefined) {
    if (!exported.includes(choice.exportName)) {
      throw new TransformExportMissingError(file, choice.exportName, exported);
    }
    return { file, exportName: choice.exportName };
  }
  if (exported.includes('default')) return { file, exportName: 'default' };
  if (exported.length === 1) return { file, exportName: exported[0]! };
  throw new TransformExportMissingError(file, undefined, exported);
}

/** The generated entry's source: deterministic for the same module and export (asset hashes stay stable). */
export function processorEntrySource(module: ResolvedTransformModule): string {
  const imported =
    module.exportName === 'default'
      ? `import transform from ${JSON.stringify(module.file)};`
      : `import { ${module.exportName} as transform } from ${JSON.stringify(module.file)};`;
  return [
    '// Generated at synth by ExactlyOncePipeline: the processor running a transform of your own.',
    imported,
    `import { ${FACTORY_NAME} } from ${JSON.stringify(PROCESSOR_HANDLER_FACTORY)};`,
    `export const handler = ${FACTORY_NAME}({ transform });`,
    '',
  ].join('\n');
}

/**
 * Writes the generated entry under the system's temporary directory, named by its content's hash (the same setting
 * always gives the same file; concurrent synths of it write the same bytes), and returns its path.
 */
export function writeProcessorEntry(module: ResolvedTransformModule): string {
  if (!existsSync(PROCESSOR_HANDLER_FACTORY)) {
    throw new InvalidSettingError(
      'transform',
      `a module transform needs the processor handler factory ${PROCESSOR_HANDLER_FACTORY}, which this installation lacks`,
    );
  }
  const source = processorEntrySource(module);
  const digest = createHash('sha256').update(source).digest('hex').slice(0, 16);
  const dir = join(tmpdir(), 'eos-processor-entries');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `processor-${digest}.mjs`);
  if (!existsSync(file) || readFileSync(file, 'utf8') !== source) writeFileSync(file, source);
  return file;
}

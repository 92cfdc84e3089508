/**
 * The processor's code for a transform setting, decided at synth. A built-in runs in the stock processor
 * (`functions/processor.ts`, which reads `EOS_TRANSFORM`). A user's module gets a generated entry that imports
 * the module's export statically and hands it to the processor's handler factory, and is bundled like every
 * function (`bundled-function.ts`): the transform is inside the bundle, nothing is looked up at cold start.
 *
 * Everything that can be wrong with the setting fails here, at synth, with the named errors `eos local` raises for
 * the same setting: an unknown built-in (listing the known ones), a module file that does not exist (its resolved
 * path), an export the module does not have (listing the exports it has). The exports are read by esbuild from the
 * module's source; then the module is bundled and imported once in a child process to check that the export is a
 * `defineTransform(…)` (a definition that `defineTransform` rejects fails there too, with its own message). The
 * check needs no TypeScript loader in the CDK app.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSync } from 'esbuild';
import {
  InvalidSettingError,
  NotATransformError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../shared/errors.ts';
import type { ColumnDefinition } from '../shared/transforms/api.ts';
import { TRANSFORM_API_SPECIFIER } from '../shared/transforms/load.ts';
import { BUILTIN_TRANSFORMS } from '../shared/transforms/registry.ts';
import type { TransformChoice } from './config.ts';

/**
 * A module of this project next to this one: the TypeScript source in the repository, its compiled `.js` when the
 * project runs as an installed package.
 */
function projectModule(relativeTs: string): string {
  const source = fileURLToPath(new URL(relativeTs, import.meta.url));
  const compiled = source.replace(/\.ts$/, '.js');
  return existsSync(source) || !existsSync(compiled) ? source : compiled;
}

export const DEFAULT_PROCESSOR_ENTRY = projectModule('../functions/processor.ts');
/** The module exporting `createProcessorHandler({ transform })`: the processor Lambda around a given transform. */
export const PROCESSOR_HANDLER_FACTORY = projectModule('../functions/processor-handler.ts');
const FACTORY_NAME = 'createProcessorHandler';
const TRANSFORM_API = projectModule('../shared/transforms/api.ts');
/** Glue's `GetSchemaVersion` for the decoders, in the entries of transforms that declare a Glue registry. */
const GLUE_LOOKUP = projectModule('../shared/decode/glue-schemas.ts');
/** The Secrets Manager reader, in the entries of transforms whose Confluent registry names `basicAuthSecret`. */
const SECRET_LOOKUP = projectModule('../shared/decode/registry-secret.ts');

/** A transform module resolved and checked: its absolute path and the export to run. */
export interface ResolvedTransformModule {
  readonly file: string;
  readonly exportName: string;
  /**
   * The transform decodes keys or values with an AWS Glue Schema Registry: its processor gets Glue's
   * `GetSchemaVersion` (client and permission); no other processor bundles the Glue client.
   */
  readonly usesGlueRegistry: boolean;
  /** The Glue registries the transform names (`registryName`); empty when one is used without a name. */
  readonly glueRegistryNames: readonly string[];
  /**
   * The Secrets Manager secrets holding a Confluent registry's credentials (`basicAuthSecret`), sorted: the
   * processor needs `secretsmanager:GetSecretValue` on each, and its entry the secret reader; empty for none.
   */
  readonly registrySecretArns: readonly string[];
  /** The transform's output columns in normal form: the stack sets `outputColumns` (Parquet) from them. */
  readonly columns: readonly ColumnDefinition[];
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
  const exportName = pickExport(file, choice.exportName, exported);
  const glue = checkIsTransform({ file, exportName });
  return { file, exportName, ...glue };
}

function pickExport(file: string, wanted: string | undefined, exported: readonly string[]): string {
  if (wanted !== undefined) {
    if (!exported.includes(wanted)) throw new TransformExportMissingError(file, wanted, exported);
    return wanted;
  }
  if (exported.includes('default')) return 'default';
  if (exported.length === 1) return exported[0]!;
  throw new TransformExportMissingError(file, undefined, exported);
}

/**
 * Bundles a probe (the module's export and the API's `isTransformDefinition`) like the Lambda bundle, runs it in a
 * child Node.js process, and throws {@link NotATransformError} when the export is something else, or an
 * {@link InvalidSettingError} carrying the module's own error when importing it throws.
 */
function checkIsTransform(
  module: Pick<ResolvedTransformModule, 'file' | 'exportName'>,
): Pick<
  ResolvedTransformModule,
  'usesGlueRegistry' | 'glueRegistryNames' | 'registrySecretArns' | 'columns'
> {
  const probe = [
    `import * as mod from ${JSON.stringify(module.file)};`,
    `import { isTransformDefinition } from ${JSON.stringify(TRANSFORM_API)};`,
    `const value = mod[${JSON.stringify(module.exportName)}];`,
    "const found = value === null ? 'null' : typeof value === 'function' ? 'a function' : Array.isArray(value) ? 'an array' : typeof value === 'object' ? 'an object' : 'a ' + typeof value;",
    'const registries = isTransformDefinition(value) ? [value.key, value.value].map((f) => f?.registry) : [];',
    "const glue = registries.filter((r) => r?.kind === 'glue');",
    "const secrets = registries.filter((r) => r?.kind === 'confluent' && r.basicAuthSecret !== undefined).map((r) => r.basicAuthSecret);",
    'process.stdout.write(JSON.stringify({ ok: isTransformDefinition(value), found, glue: glue.map((r) => r.registryName ?? null), secrets, columns: isTransformDefinition(value) ? value.columns : [] }));',
  ].join('\n');
  const dir = mkdtempSync(join(tmpdir(), 'eos-transform-check-'));
  try {
    const outfile = join(dir, 'probe.mjs');
    buildSync({
      stdin: { contents: probe, resolveDir: dirname(module.file), loader: 'js' },
      // As the processor's bundle does (scripts/bundle.mjs): the API is this package's, wherever the module lives.
      alias: { [TRANSFORM_API_SPECIFIER]: TRANSFORM_API },
      outfile,
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      banner: {
        js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
      },
      logLevel: 'silent',
    });
    let output: string;
    try {
      output = execFileSync(process.execPath, [outfile], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (error) {
      const stderr = String((error as { stderr?: unknown }).stderr ?? '');
      const reason = stderr.split('\n').find((line) => /Error\b/.test(line)) ?? stderr.trim().split('\n')[0];
      throw new InvalidSettingError('transform', `importing ${module.file} failed: ${reason}`);
    }
    const result = JSON.parse(output) as {
      ok: boolean;
      found: string;
      glue: (string | null)[];
      secrets: unknown[];
      columns: ColumnDefinition[];
    };
    if (!result.ok) throw new NotATransformError(module.file, module.exportName, result.found);
    const named = result.glue.every((name) => typeof name === 'string');
    return {
      usesGlueRegistry: result.glue.length > 0,
      glueRegistryNames: named ? [...new Set(result.glue as string[])].sort() : [],
      registrySecretArns: [...new Set(result.secrets.map(String))].sort(),
      columns: result.columns,
    };
  } catch (error) {
    if (error instanceof InvalidSettingError || error instanceof NotATransformError) throw error;
    throw new InvalidSettingError('transform', `cannot bundle ${module.file}: ${(error as Error).message}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The output columns of the transform the stack deploys: a built-in's from its definition, a module's as the
 * synth-time probe read them. The processor and coordinator get them as `EOS_OUTPUT_COLUMNS`.
 */
export function transformColumns(
  choice: TransformChoice,
  module: ResolvedTransformModule | undefined,
): readonly ColumnDefinition[] {
  if (module) return module.columns;
  if (choice.kind !== 'built-in') throw new InvalidSettingError('transform', 'the module was not resolved');
  return BUILTIN_TRANSFORMS[choice.name]!.columns;
}

/** The generated entry's source: deterministic for the same module and export (asset hashes stay stable). */
export function processorEntrySource(module: ResolvedTransformModule): string {
  const imported =
    module.exportName === 'default'
      ? `import transform from ${JSON.stringify(module.file)};`
      : `import { ${module.exportName} as transform } from ${JSON.stringify(module.file)};`;
  const imports: string[] = [];
  const decode: string[] = [];
  if (module.usesGlueRegistry) {
    imports.push(`import { glueSchemaVersionLookup } from ${JSON.stringify(GLUE_LOOKUP)};`);
    decode.push('glueGetSchemaVersion: glueSchemaVersionLookup()');
  }
  if (module.registrySecretArns.length > 0) {
    imports.push(`import { registrySecretLookup } from ${JSON.stringify(SECRET_LOOKUP)};`);
    decode.push('registrySecret: registrySecretLookup()');
  }
  const options = decode.length > 0 ? `{ transform, decode: { ${decode.join(', ')} } }` : '{ transform }';
  return [
    '// Generated at synth by ExactlyOncePipeline: the processor running a transform of your own.',
    imported,
    `import { ${FACTORY_NAME} } from ${JSON.stringify(PROCESSOR_HANDLER_FACTORY)};`,
    ...imports,
    `export const handler = ${FACTORY_NAME}(${options});`,
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

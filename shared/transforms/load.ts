/**
 * Finds the transform a `transform` setting names: a built-in by name (`orders`, `passthrough`), or a user's
 * module by path with an optional export, `<path to a .ts/.js module>[#<export>]`. Without `#<export>` the module's
 * default export is taken, else its only export made by `defineTransform`. Every way this can go wrong is a named
 * error that says what was looked for and what was found, raised when the transform is loaded (the local runner's
 * start, the construct's synth), never per record.
 *
 * The Lambda does not load by path: its bundle imports the user's module statically (see
 * `functions/processor-handler.ts`).
 */
import { existsSync } from 'node:fs';
import Module, { register } from 'node:module';
import { extname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FieldFormat } from '../decode/formats.ts';
import { registrySecretLookup } from '../decode/registry-secret.ts';
import {
  NotATransformError,
  TransformDependencyMissingError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../errors.ts';
import { type AdapterDependencies, loadDecoders, toTransform } from './adapter.ts';
import { type AnyTransformDefinition, isTransformDefinition } from './api.ts';
import { BUILTIN_TRANSFORMS } from './registry.ts';
import type { Transform } from './types.ts';

const MODULE_EXTENSIONS: ReadonlySet<string> = new Set(['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs']);

/** What a `transform` setting names. */
export type TransformRef =
  | { readonly kind: 'builtin'; readonly name: string }
  | { readonly kind: 'module'; readonly path: string; readonly exportName: string | undefined };

/** A ref is a module path when it has a path separator or a module file extension; otherwise a built-in name. */
export function parseTransformRef(ref: string): TransformRef {
  const hash = ref.lastIndexOf('#');
  const path = hash === -1 ? ref : ref.slice(0, hash);
  const exportName = hash === -1 ? undefined : ref.slice(hash + 1);
  const isPath = /[\\/]/.test(path) || MODULE_EXTENSIONS.has(extname(path));
  if (!isPath) {
    if (hash !== -1) throw new UnknownTransformError(ref, Object.keys(BUILTIN_TRANSFORMS));
    return { kind: 'builtin', name: ref };
  }
  return { kind: 'module', path, exportName: exportName === '' ? undefined : exportName };
}

export interface LoadedTransform {
  /** The definition as the user (or the built-in) wrote it. */
  readonly definition: AnyTransformDefinition;
  /** The definition in the processor's form. */
  readonly transform: Transform;
  /** The module's absolute path, for a module; undefined for a built-in. */
  readonly file: string | undefined;
  /** The export taken (`default` or a name), for a module. */
  readonly exportName: string | undefined;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return `a ${typeof value}`;
}

function pick(
  file: string,
  module: Readonly<Record<string, unknown>>,
  exportName: string | undefined,
): [string, AnyTransformDefinition] {
  // Sorted, as an ES module namespace lists them (bundlers and test runners may not).
  const names = Object.keys(module).sort();
  const wanted = exportName ?? (Object.hasOwn(module, 'default') ? 'default' : undefined);
  if (wanted !== undefined) {
    if (!Object.hasOwn(module, wanted)) throw new TransformExportMissingError(file, wanted, names);
    const value = module[wanted];
    if (!isTransformDefinition(value)) throw new NotATransformError(file, wanted, describe(value));
    return [wanted, value];
  }
  const defined = names.filter((name) => isTransformDefinition(module[name]));
  if (defined.length !== 1) throw new TransformExportMissingError(file, undefined, names);
  return [defined[0]!, module[defined[0]!] as AnyTransformDefinition];
}

/** The name a user's transform module imports the transform API by (package.json `exports`). */
export const TRANSFORM_API_SPECIFIER = 'msk-exactly-once-pipeline/transform';

/**
 * A resolve hook for modules loaded by path: a transform that lives outside this package (the user's own
 * repository, no `npm install` of the pipeline there) still finds the transform API — this package's own, the one
 * the runner checks definitions against. Where the specifier resolves on its own (the package installed beside the
 * transform), that resolution wins. Kept as a data URL: the hook runs on the loader thread, which loads no
 * TypeScript, and the installed package ships no extra file for it.
 */
const API_FALLBACK_HOOK = `
let fallbacks = {};
export function initialize(data) { fallbacks = data; }
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (error) {
    if (error && error.code === 'ERR_MODULE_NOT_FOUND' && Object.hasOwn(fallbacks, specifier))
      return { url: fallbacks[specifier], shortCircuit: true };
    throw error;
  }
}`;

let apiFallbackRegistered = false;

type ResolveFilename = (this: unknown, request: string, ...rest: unknown[]) => string;

/**
 * Both loaders need the fallback: a `.ts` transform in a folder without a package.json of `"type": "module"` is
 * compiled to CommonJS by tsx, and its import of the API becomes a require(), which module hooks do not see on
 * Node 20; `Module._resolveFilename` is where CommonJS resolves (the hook tsx itself wraps).
 */
function registerApiFallback(): void {
  if (apiFallbackRegistered) return;
  apiFallbackRegistered = true;
  const api = new URL(import.meta.url.endsWith('.ts') ? './api.ts' : './api.js', import.meta.url);
  register(`data:text/javascript,${encodeURIComponent(API_FALLBACK_HOOK)}`, {
    data: { [TRANSFORM_API_SPECIFIER]: api.href },
  });
  const cjs = Module as unknown as { _resolveFilename: ResolveFilename };
  const resolveFilename = cjs._resolveFilename;
  cjs._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
    try {
      return resolveFilename.call(this, request, ...rest);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (request === TRANSFORM_API_SPECIFIER && code === 'MODULE_NOT_FOUND') return fileURLToPath(api);
      throw error;
    }
  };
}

/** What a module that does not resolve is called in Node's CommonJS and ESM errors. */
const UNRESOLVED = /^Cannot find (?:module|package) '([^']+)'/;

async function importTransformModule(file: string): Promise<Record<string, unknown>> {
  try {
    return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    const missing = typeof message === 'string' ? UNRESOLVED.exec(message)?.[1] : undefined;
    if (
      (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') &&
      missing &&
      !missing.startsWith('/')
    )
      throw new TransformDependencyMissingError(file, missing, { cause: error });
    throw error;
  }
}

/**
 * Loads the transform `ref` names. Relative module paths resolve against `cwd` (default: the process's working
 * directory). Throws {@link UnknownTransformError}, {@link TransformModuleNotFoundError},
 * {@link TransformExportMissingError} or {@link NotATransformError}; a module that throws while it is imported
 * (an invalid definition, say) fails with its own error.
 */
export async function loadTransform(ref: string, cwd: string = process.cwd()): Promise<LoadedTransform> {
  const parsed = parseTransformRef(ref);
  if (parsed.kind === 'builtin') {
    if (!Object.hasOwn(BUILTIN_TRANSFORMS, parsed.name)) {
      throw new UnknownTransformError(parsed.name, Object.keys(BUILTIN_TRANSFORMS));
    }
    const definition = BUILTIN_TRANSFORMS[parsed.name]!;
    await loadDecoders(definition);
    return {
      definition,
      transform: toTransform(definition, secretsFor(definition)),
      file: undefined,
      exportName: undefined,
    };
  }
  const file = resolve(cwd, parsed.path);
  if (!existsSync(file)) throw new TransformModuleNotFoundError(file);
  registerApiFallback();
  const module = await importTransformModule(file);
  const [exportName, definition] = pick(file, module, parsed.exportName);
  await loadDecoders(definition);
  return { definition, transform: toTransform(definition, secretsFor(definition)), file, exportName };
}

/** True when a field's Confluent registry reads its credentials from Secrets Manager (`basicAuthSecret`). */
export function usesRegistrySecret(definition: AnyTransformDefinition): boolean {
  const secret = (format: FieldFormat) =>
    'registry' in format &&
    format.registry?.kind === 'confluent' &&
    format.registry.basicAuthSecret !== undefined;
  return secret(definition.key) || secret(definition.value);
}

/** True when a field decodes through a Glue registry (as the construct decides for the Lambda). */
export function usesGlue(definition: AnyTransformDefinition): boolean {
  const glue = (format: FieldFormat) => 'registry' in format && format.registry?.kind === 'glue';
  return glue(definition.key) || glue(definition.value);
}

/** The secret reader a transform outside Lambda needs, as the construct's generated entry gives it to the processor. */
export function secretsFor(definition: AnyTransformDefinition): AdapterDependencies {
  return usesRegistrySecret(definition) ? { registrySecret: registrySecretLookup() } : {};
}

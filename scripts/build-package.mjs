#!/usr/bin/env node
// Builds the installable package into dist/: a folder laid out like the repository (infra/, functions/, shared/,
// cli/, local/, scripts/bundle.mjs) with compiled JavaScript and type declarations instead of TypeScript sources,
// and a package.json of its own. `npm pack ./dist` makes the tarball a CDK app installs.
//
// Why a package.json of its own: inside the repository, `msk-exactly-once-pipeline/transform` must resolve to the
// TypeScript source (the examples, the docs' transforms and the tests import it by that name, through tsx, vitest
// and esbuild, with no build step). The installed package must resolve it to compiled JavaScript. One manifest
// cannot say both, so the package's is derived from the repository's here: the same name, version, dependencies
// and entry points, each `.ts` target mapped to its `.js` and `.d.ts`, no scripts and no devDependencies.
//
// Why the same layout: the construct finds the handlers it bundles at synth (functions/*.ts or, installed, their
// compiled .js) and scripts/bundle.mjs relative to its own file, as in the repository.
//
// Usage: node scripts/build-package.mjs [outdir]   (default dist/)
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Files shipped as they are, next to the compiled ones. */
const COPIED = ['LICENSE', 'README.md', 'scripts/bundle.mjs', 'local/s3-server.cjs'];

/** Thrown when the package cannot be built as described (a missing entry point, a failed compile). */
export class PackageBuildError extends Error {
  name = 'PackageBuildError';
}

/** Compiles the sources listed in tsconfig.build.json to `outDir`: JavaScript and declarations. */
function compile(outDir) {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', outDir], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
    });
  } catch (error) {
    throw new PackageBuildError(`tsc failed:\n${error.stdout ?? ''}${error.stderr ?? ''}`);
  }
}

function* filesUnder(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* filesUnder(path);
    else yield path;
  }
}

// tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits but not in declarations (microsoft/TypeScript#61037,
// open). TypeScript still reads them, but other tools and editors look for a `./x.ts` that is not shipped: the
// relative specifiers of the emitted declarations are rewritten the same way here. Hand-written because it is one
// pattern over tsc's own output (quoted relative specifiers in import, export and import() type positions).
const RELATIVE_TS_SPECIFIER = /(['"])(\.{1,2}\/[^'"\n]*?)(?<!\.d)\.([cm]?)ts\1/g;

export function rewriteDeclarationSpecifiers(text) {
  return text.replace(
    RELATIVE_TS_SPECIFIER,
    (_match, quote, path, kind) => `${quote}${path}.${kind}js${quote}`,
  );
}

function rewriteDeclarations(outDir) {
  for (const file of filesUnder(outDir)) {
    if (!/\.d\.[cm]?ts$/.test(file)) continue;
    const text = readFileSync(file, 'utf8');
    const rewritten = rewriteDeclarationSpecifiers(text);
    if (rewritten !== text) writeFileSync(file, rewritten);
  }
}

/** `./infra/index.ts` → `{ types: './infra/index.d.ts', default: './infra/index.js' }`; other targets as they are. */
function compiledTarget(target) {
  if (typeof target === 'string' && target.endsWith('.ts')) {
    return { types: target.replace(/\.ts$/, '.d.ts'), default: target.replace(/\.ts$/, '.js') };
  }
  if (typeof target === 'string') return target;
  const source = target.default ?? target.import;
  if (typeof source !== 'string')
    throw new PackageBuildError(`unsupported export target ${JSON.stringify(target)}`);
  return compiledTarget(source);
}

/** The installed package's manifest, from the repository's. */
export function packageManifest(root) {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const exports = Object.fromEntries(
    Object.entries(manifest.exports).map(([name, target]) => [name, compiledTarget(target)]),
  );
  const pick = (...keys) =>
    Object.fromEntries(keys.filter((k) => manifest[k] !== undefined).map((k) => [k, manifest[k]]));
  return {
    ...pick('name', 'version', 'description', 'license', 'private', 'type', 'engines'),
    exports,
    // The compiled CLI itself: no TypeScript loader (tsx is a dev dependency of the repository, not of the package).
    bin: { eos: './cli/eos.js' },
    ...pick('dependencies', 'optionalDependencies', 'peerDependencies', 'peerDependenciesMeta'),
  };
}

/** Every file an export or the bin names must have been built. */
function checkEntryPoints(outDir, manifest) {
  const targets = [
    ...Object.values(manifest.exports).flatMap((t) => (typeof t === 'string' ? [t] : Object.values(t))),
    ...Object.values(manifest.bin),
  ];
  const missing = targets.filter((t) => !existsSync(join(outDir, t)));
  if (missing.length > 0) throw new PackageBuildError(`entry points not built: ${missing.join(', ')}`);
}

export function buildPackage(outDir = join(ROOT, 'dist')) {
  rmSync(outDir, { recursive: true, force: true });
  compile(outDir);
  rewriteDeclarations(outDir);
  for (const file of COPIED) {
    mkdirSync(dirname(join(outDir, file)), { recursive: true });
    copyFileSync(join(ROOT, file), join(outDir, file));
  }
  const manifest = packageManifest(ROOT);
  writeFileSync(join(outDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  checkEntryPoints(outDir, manifest);
  return outDir;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    const outDir = buildPackage(process.argv[2] ? resolve(process.argv[2]) : undefined);
    process.stdout.write(`package built in ${outDir} (npm pack ${outDir})\n`);
  } catch (error) {
    process.stderr.write(`${error instanceof PackageBuildError ? error.message : error.stack}\n`);
    process.exit(1);
  }
}

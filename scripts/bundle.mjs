#!/usr/bin/env node
// Bundles one Lambda handler the way the stack deploys it and the benchmark measures it: esbuild, minified ESM
// for Node.js 24 (the Lambda runtime), the project's locked AWS SDK v3 bundled in, and zod's 40-odd message
// locales left out.
//
// Why the SDK is bundled: the functions then run the SDK version the tests ran (package-lock.json), not whatever
// copy the Lambda runtime ships that day; and the benchmark measured the bundled SDK initialising faster (one
// pre-linked module instead of hundreds of files resolved from the runtime's node_modules), at ~3x the size.
//
// Why the locales: zod 4 re-exports every locale through its `z` namespace object, which esbuild cannot
// tree-shake; they are ~260 KB of the processor's ~470 KB. The pipeline uses zod's default English messages,
// which zod loads from `locales/en.js` directly, so only the unused `z.locales` namespace disappears.
//
// Why code splitting: what is reached only by a dynamic `import()` — the SDK's credential providers other than the
// environment's (ini, SSO, process, web identity, container, IMDS, with their nested STS/SSO clients) and the
// processor's Avro/Protobuf codecs when the transform does not use them — goes to chunks/*.mjs, which Node reads
// and compiles only if that import runs. In one file they were parsed at every cold start: splitting measured the
// processor's init ~20 ms faster (`npx tsx bench/cold-start.ts`). A bundle is therefore a folder (index.mjs and
// chunks/), which the CDK asset takes whole; `bundleFiles` lists it.
//
// Usage: node scripts/bundle.mjs <entry.ts> <outdir>   → <outdir>/index.mjs (+ <outdir>/chunks/*.mjs)
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, extname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, transform } from 'esbuild';

const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const NAMED_LOADERS = { '.ts': 'ts', '.mts': 'ts', '.js': 'js', '.mjs': 'js' };

/**
 * Readable names in stack traces where they help, our own code, without paying for them everywhere: esbuild's
 * `keepNames` wraps every function and class of the bundle in a `__name()` call run at load, and the SDK and zod
 * have thousands (measured ~10 ms of the processor's init). So the build minifies names, and this plugin keeps
 * them in this project's own modules only, by compiling each with `keepNames` first.
 */
export const projectNames = {
  name: 'project-names',
  setup(build) {
    build.onLoad({ filter: /\.[mc]?[jt]s$/ }, async (args) => {
      const inProject = relative(PROJECT_ROOT, args.path);
      const loader = NAMED_LOADERS[extname(args.path)];
      if (!loader || inProject.startsWith('..') || inProject.split(sep).includes('node_modules'))
        return undefined;
      const source = readFileSync(args.path, 'utf8');
      const { code } = await transform(source, {
        loader,
        keepNames: true,
        format: 'esm',
        target: 'node24',
        sourcefile: args.path,
        tsconfigRaw: { compilerOptions: { verbatimModuleSyntax: true } },
      });
      return { contents: code, loader: 'js', resolveDir: dirname(args.path) };
    });
  },
};

export const leanZodLocales = {
  name: 'lean-zod-locales',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]/.test(args.importer) ? { path: 'zod-locales', namespace: 'lean-zod' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'lean-zod' }, () => ({ contents: 'export {};', loader: 'js' }));
  },
};

/**
 * The AWS SDK's browser user-agent parser (`createUserAgentStringParsingProvider`, which imports `bowser` lazily)
 * is exported by @aws-sdk/core's Node build but called by nothing in it; esbuild still emits its 35 KB chunk. An
 * empty module stands in for bowser, so the functions carry no browser code.
 */
export const noBrowserUserAgent = {
  name: 'no-browser-user-agent',
  setup(build) {
    build.onResolve({ filter: /^bowser$/ }, () => ({ path: 'bowser', namespace: 'no-browser-user-agent' }));
    build.onLoad({ filter: /.*/, namespace: 'no-browser-user-agent' }, () => ({
      contents: 'export default undefined;',
      loader: 'js',
    }));
  },
};

/** The transform API of this package: its TypeScript source in the repository, its compiled module installed. */
const TRANSFORM_API = ['ts', 'js']
  .map((ext) => join(PROJECT_ROOT, 'shared', 'transforms', `api.${ext}`))
  .find((file) => existsSync(file));

/**
 * A user's transform imports `msk-exactly-once-pipeline/transform`; it is this package's own module wherever the
 * transform lives (a folder with nothing installed, another copy of the package beside it): the processor checks
 * definitions against this one.
 */
export const ownTransformApi = {
  name: 'own-transform-api',
  setup(build) {
    if (TRANSFORM_API === undefined) return;
    build.onResolve({ filter: /^msk-exactly-once-pipeline\/transform$/ }, () => ({ path: TRANSFORM_API }));
  },
};

/**
 * `options.bundleAwsSdk` (default true): `false` leaves the SDK to the Lambda runtime (the benchmark's comparison).
 * `options.onMetafile`: called with esbuild's metafile (what went into which file), for tests of the bundle.
 */
export async function bundleHandler(entry, outdir, options = {}) {
  mkdirSync(outdir, { recursive: true });
  // Chunk names carry content hashes: a rebuild into the same folder must not leave the last build's chunks.
  rmSync(join(outdir, 'chunks'), { recursive: true, force: true });
  const result = await build({
    entryPoints: { index: resolve(entry) },
    outdir,
    splitting: true,
    chunkNames: 'chunks/[name]-[hash]',
    outExtension: { '.js': '.mjs' },
    bundle: true,
    minify: true,
    sourcemap: false,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    // Readable names in stack traces for this project's code only (see `projectNames`).
    keepNames: false,
    mainFields: ['module', 'main'],
    external: options.bundleAwsSdk === false ? ['@aws-sdk/*'] : [],
    plugins: [leanZodLocales, projectNames, ownTransformApi, noBrowserUserAgent],
    // ESM bundles of CommonJS dependencies still call require(): give them one.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    logLevel: 'error',
    metafile: options.onMetafile !== undefined,
  });
  if (options.onMetafile && result.metafile) options.onMetafile(result.metafile);
  return join(outdir, 'index.mjs');
}

/** Every file of a bundle folder (`index.mjs` first, then its chunks), as paths. */
export function bundleFiles(outdir) {
  const chunks = join(outdir, 'chunks');
  let names = [];
  try {
    names = readdirSync(chunks)
      .filter((name) => name.endsWith('.mjs'))
      .sort();
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
  return [join(outdir, 'index.mjs'), ...names.map((name) => join(chunks, name))];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [entry, outdir] = process.argv.slice(2);
  if (!entry || !outdir) {
    process.stderr.write('usage: node scripts/bundle.mjs <entry.ts> <outdir>\n');
    process.exit(2);
  }
  await bundleHandler(entry, outdir);
}

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
// Usage: node scripts/bundle.mjs <entry.ts> <outdir>   → <outdir>/index.mjs
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';

export const leanZodLocales = {
  name: 'lean-zod-locales',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]/.test(args.importer) ? { path: 'zod-locales', namespace: 'lean-zod' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'lean-zod' }, () => ({ contents: 'export {};', loader: 'js' }));
  },
};

/** `options.bundleAwsSdk` (default true): `false` leaves the SDK to the Lambda runtime (the benchmark's comparison). */
export async function bundleHandler(entry, outdir, options = {}) {
  mkdirSync(outdir, { recursive: true });
  const outfile = join(outdir, 'index.mjs');
  await build({
    entryPoints: [resolve(entry)],
    outfile,
    bundle: true,
    minify: true,
    sourcemap: false,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    // Readable names in stack traces, for the price of a few KB.
    keepNames: true,
    mainFields: ['module', 'main'],
    external: options.bundleAwsSdk === false ? ['@aws-sdk/*'] : [],
    plugins: [leanZodLocales],
    // ESM bundles of CommonJS dependencies still call require(): give them one.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    logLevel: 'error',
  });
  return outfile;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [entry, outdir] = process.argv.slice(2);
  if (!entry || !outdir) {
    process.stderr.write('usage: node scripts/bundle.mjs <entry.ts> <outdir>\n');
    process.exit(2);
  }
  await bundleHandler(entry, outdir);
}

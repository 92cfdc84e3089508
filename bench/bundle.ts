/**
 * The Lambda bundles as the stack builds them (esbuild, minified, ESM, Node 22, the AWS SDK v3 left to the
 * runtime as NodejsFunction does by default), and each module's initialisation time in a fresh Node process.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { median } from './stats.ts';

export interface BundleResult {
  handler: string;
  bytes: number;
  kilobytes: number;
  initMs: number;
  initRunsMs: number[];
}

const HANDLERS = ['processor', 'coordinator'] as const;

function initTime(file: string, root: string): number {
  const script = `const t = performance.now(); await import(${JSON.stringify(file)}); process.stdout.write(String(performance.now() - t));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    env: {
      ...process.env,
      EOS_LEDGER_TABLE: 'ledger',
      EOS_BUCKET: 'bucket',
      AWS_REGION: 'us-east-1',
      POWERTOOLS_DEV: 'false',
    },
    encoding: 'utf8',
  });
  return Number(out);
}

export async function measureBundles(root: string): Promise<BundleResult[]> {
  const outdir = join(root, 'bench', 'out');
  mkdirSync(outdir, { recursive: true });
  const results: BundleResult[] = [];
  for (const handler of HANDLERS) {
    const outfile = join(outdir, `${handler}.mjs`);
    await build({
      entryPoints: [join(root, 'functions', `${handler}.ts`)],
      outfile,
      bundle: true,
      minify: true,
      format: 'esm',
      platform: 'node',
      target: 'node22',
      external: ['@aws-sdk/*'],
      banner: {
        js: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
      },
      logLevel: 'error',
    });
    const runs = Array.from({ length: 5 }, () => Number(initTime(outfile, root).toFixed(1)));
    const bytes = statSync(outfile).size;
    results.push({
      handler,
      bytes,
      kilobytes: Number((bytes / 1024).toFixed(1)),
      initMs: median(runs),
      initRunsMs: runs,
    });
  }
  return results;
}

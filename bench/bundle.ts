/**
 * The Lambda bundles exactly as the stack builds them (`scripts/bundle.mjs`: esbuild, minified ESM for Node 24,
 * the locked AWS SDK v3 bundled in), and each module's initialisation time in a fresh Node process: in total,
 * and with the AWS SDK clients' own modules loaded beforehand (the baseline every Lambda that uses them pays).
 * For comparison, the processor with the SDK left to the runtime (labelled plain `processor`).
 */
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { bundleHandler } from '../scripts/bundle.mjs';
import { median } from './stats.ts';

export interface BundleResult {
  handler: string;
  bytes: number;
  kilobytes: number;
  /** Import of the bundle in a fresh process, everything included. */
  initMs: number;
  initRunsMs: number[];
  /** Import of the AWS SDK v3 client modules alone, in a fresh process (baseline). */
  sdkLoadMs: number;
  /** Import of the bundle after the SDK modules were loaded in the same process: the pipeline's own init. */
  initWithoutSdkMs: number;
}

/** The deployed bundles (SDK bundled), and the processor with the runtime's SDK: the size alternative. */
const VARIANTS = [
  { handler: 'processor', bundleAwsSdk: true },
  { handler: 'coordinator', bundleAwsSdk: true },
  { handler: 'processor', bundleAwsSdk: false },
] as const;
const SDK_MODULES = ['@aws-sdk/client-dynamodb', '@aws-sdk/client-s3', '@aws-sdk/lib-dynamodb'];
const RUNS = 7;

function timeIn(root: string, script: string): { sdk: number; bundle: number } {
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    env: {
      ...process.env,
      EOS_LEDGER_TABLE: 'ledger',
      EOS_BUCKET: 'bucket',
      AWS_REGION: 'us-east-1',
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    },
    encoding: 'utf8',
  });
  return JSON.parse(out) as { sdk: number; bundle: number };
}

function measureInit(root: string, file: string, preloadSdk: boolean): { sdk: number; bundle: number } {
  const preload = preloadSdk ? SDK_MODULES.map((m) => `await import(${JSON.stringify(m)});`).join(' ') : '';
  return timeIn(
    root,
    `const s = performance.now(); ${preload} const t = performance.now(); await import(${JSON.stringify(file)});` +
      ' process.stdout.write(JSON.stringify({ sdk: t - s, bundle: performance.now() - t }));',
  );
}

export async function measureBundles(root: string): Promise<BundleResult[]> {
  const results: BundleResult[] = [];
  for (const { handler, bundleAwsSdk } of VARIANTS) {
    const outfile = await bundleHandler(
      join(root, 'functions', `${handler}.ts`),
      join(root, 'bench', 'out', bundleAwsSdk ? `${handler}-sdk` : `${handler}-runtime-sdk`),
      { bundleAwsSdk },
    );
    const cold = Array.from({ length: RUNS }, () => measureInit(root, outfile, false).bundle);
    const split = Array.from({ length: RUNS }, () => measureInit(root, outfile, true));
    const bytes = statSync(outfile).size;
    results.push({
      handler: bundleAwsSdk ? `${handler} (AWS SDK bundled)` : handler,
      bytes,
      kilobytes: Number((bytes / 1024).toFixed(1)),
      initMs: Number(median(cold).toFixed(1)),
      initRunsMs: cold.map((ms) => Number(ms.toFixed(1))),
      sdkLoadMs: Number(median(split.map((s) => s.sdk)).toFixed(1)),
      initWithoutSdkMs: Number(median(split.map((s) => s.bundle)).toFixed(1)),
    });
  }
  return results;
}

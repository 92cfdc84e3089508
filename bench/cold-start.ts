/**
 * The processor Lambda's cold start on this machine: `init_ms_processor`, the time a fresh Node process takes to
 * import the processor bundle (module evaluation: the AWS SDK, zod, middy, Powertools, the settings read from the
 * environment, the handler built), as the Lambda runtime does before the first invocation. Target: < 150 ms.
 *
 * The bundle is built exactly as the stack builds it (`scripts/bundle.mjs`, which `infra/bundled-function.ts`
 * runs: esbuild, minified ESM for Node 24), once with the locked AWS SDK bundled in (what deploys) and once with
 * the SDK left to the runtime (resolved from node_modules here, as the runtime's copy would be). Each variant is
 * imported in N fresh processes (median, min and max printed). The runtime-SDK variant is imported N times more
 * after the SDK client modules were imported in the same process, which splits its figure into the SDK's share
 * and the pipeline's own (the bundled variant carries its own SDK copy, which no preload can share).
 *
 * Usage: npx tsx bench/cold-start.ts [--runs N]   (default 15). Prints a table and one JSON line.
 * Run alone it writes nothing; `npm run bench` (bench/run.ts) calls {@link measureColdStart} and records
 * `init_ms_processor` in bench/results.json. The bundles go to bench/out/cold-start/.
 */
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleHandler } from '../scripts/bundle.mjs';
import { median } from './stats.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SDK_MODULES = ['@aws-sdk/client-dynamodb', '@aws-sdk/client-s3', '@aws-sdk/lib-dynamodb'];
const TARGET_MS = 150;

/** What one fresh process measured: the SDK modules' import (0 when not preloaded) and the bundle's. */
interface Sample {
  readonly sdkMs: number;
  readonly bundleMs: number;
}

export class ColdStartMeasurementError extends Error {
  constructor(file: string, cause: unknown) {
    super(`importing ${file} in a fresh node process failed`, { cause });
    this.name = 'ColdStartMeasurementError';
  }
}

/** The settings a processor reads at init; the values only have to pass the schema. */
const LAMBDA_ENV = {
  EOS_LEDGER_TABLE: 'ledger',
  EOS_BUCKET: 'bucket',
  AWS_REGION: 'us-east-1',
  AWS_LAMBDA_FUNCTION_NAME: 'eos-processor',
  AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
};

/** One fresh `node` importing `file` (after the SDK modules when `preloadSdk`); timed inside that process. */
function sample(file: string, preloadSdk: boolean): Sample {
  const preload = preloadSdk ? SDK_MODULES.map((m) => `await import(${JSON.stringify(m)});`).join(' ') : '';
  const script =
    `const s = performance.now(); ${preload} const t = performance.now();` +
    ` await import(${JSON.stringify(file)});` +
    ' process.stdout.write(JSON.stringify({ sdkMs: t - s, bundleMs: performance.now() - t }));';
  try {
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: root,
      // Only what a Lambda would have: no NODE_OPTIONS (tsx's loader) from the shell running this script.
      env: { PATH: process.env.PATH ?? '', ...LAMBDA_ENV },
      encoding: 'utf8',
    });
    return JSON.parse(out) as Sample;
  } catch (error) {
    throw new ColdStartMeasurementError(file, error);
  }
}

export interface VariantResult {
  readonly variant: string;
  readonly kilobytes: number;
  readonly initMs: number;
  readonly minMs: number;
  readonly maxMs: number;
  /** Runtime-SDK variant only: the SDK client modules' import, then the bundle's with them loaded. */
  readonly sdkShareMs?: number;
  readonly ownInitMs?: number;
}

async function measure(bundleAwsSdk: boolean, runs: number): Promise<VariantResult> {
  const outdir = join(root, 'bench', 'out', 'cold-start', bundleAwsSdk ? 'sdk-bundled' : 'runtime-sdk');
  const file = await bundleHandler(join(root, 'functions', 'processor.ts'), outdir, { bundleAwsSdk });
  sample(file, false); // warms the OS file cache, as a Lambda's code is on local disk before init
  const cold = Array.from({ length: runs }, () => sample(file, false).bundleMs);
  const split = bundleAwsSdk ? [] : Array.from({ length: runs }, () => sample(file, true));
  const round = (ms: number) => Number(ms.toFixed(1));
  return {
    variant: bundleAwsSdk ? 'AWS SDK bundled (deployed)' : 'AWS SDK from the runtime',
    kilobytes: round(statSync(file).size / 1024),
    initMs: round(median(cold)),
    minMs: round(Math.min(...cold)),
    maxMs: round(Math.max(...cold)),
    ...(split.length === 0
      ? {}
      : {
          sdkShareMs: round(median(split.map((s) => s.sdkMs))),
          ownInitMs: round(median(split.map((s) => s.bundleMs))),
        }),
  };
}

function runsFrom(argv: readonly string[]): number {
  const at = argv.indexOf('--runs');
  if (at === -1) return 15;
  const runs = Number(argv[at + 1]);
  if (!Number.isInteger(runs) || runs < 1) {
    process.stderr.write('--runs needs a positive integer\n');
    process.exit(2);
  }
  return runs;
}

export interface ColdStartResult {
  /** The deployed variant's (AWS SDK bundled) median init. */
  readonly init_ms_processor: number;
  readonly target_ms: number;
  readonly met: boolean;
  readonly runs: number;
  readonly variants: readonly VariantResult[];
}

/** Both variants, `runs` fresh processes each: what `main` prints, for `bench/run.ts` to record. */
export async function measureColdStart(runs = 15): Promise<ColdStartResult> {
  const variants = [await measure(true, runs), await measure(false, runs)];
  const deployed = variants[0]!;
  return {
    init_ms_processor: deployed.initMs,
    target_ms: TARGET_MS,
    met: deployed.initMs < TARGET_MS,
    runs,
    variants,
  };
}

async function main(): Promise<void> {
  const runs = runsFrom(process.argv.slice(2));
  const results = (await measureColdStart(runs)).variants;
  process.stdout.write(
    `processor cold start (median of ${runs} fresh node ${process.version} processes; target init < ${TARGET_MS} ms)\n`,
  );
  for (const r of results) {
    process.stdout.write(
      `  ${r.variant.padEnd(28)} ${String(r.kilobytes).padStart(7)} KB  init ${String(r.initMs).padStart(6)} ms` +
        ` (min ${r.minMs}, max ${r.maxMs})` +
        (r.sdkShareMs === undefined
          ? '\n'
          : `;  SDK client modules alone ${r.sdkShareMs} ms, then the bundle ${r.ownInitMs} ms\n`),
    );
  }
  const deployed = results[0]!;
  process.stdout.write(
    `${JSON.stringify({ init_ms_processor: deployed.initMs, target_ms: TARGET_MS, met: deployed.initMs < TARGET_MS, variants: results })}\n`,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();

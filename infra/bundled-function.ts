/**
 * A Lambda function bundled by `scripts/bundle.mjs` — the same bundling the benchmark measures — instead of
 * NodejsFunction's: minified ESM for the function's Node.js runtime, the AWS SDK v3 taken from the runtime, and
 * zod's unused message locales left out (NodejsFunction cannot run esbuild plugins). Bundling runs locally with
 * the project's esbuild: no Docker. Skipped, like any asset bundling, when the stack is not being bundled
 * (context `aws:cdk:bundling-stacks`).
 */
import { execFileSync } from 'node:child_process';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AssetHashType, DockerImage } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';

export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BUNDLE_SCRIPT = join(PROJECT_ROOT, 'scripts', 'bundle.mjs');

/** The code asset of one handler module (`functions/<name>.ts`), bundled to `index.mjs`. */
export function bundledCode(entry: string): lambda.Code {
  const absoluteEntry = resolve(PROJECT_ROOT, entry);
  const relativeEntry = relative(PROJECT_ROOT, absoluteEntry);
  return lambda.Code.fromAsset(PROJECT_ROOT, {
    // Hash what was built, not the project folder (node_modules included) it was built from.
    assetHashType: AssetHashType.OUTPUT,
    bundling: {
      // Never used: local bundling always succeeds or throws. Docker is not needed.
      image: DockerImage.fromRegistry('local-bundling-only'),
      // CDK caches staged assets by source path and the serializable bundling options; `tryBundle` is a function
      // and does not count, so the entry must appear here, or every function would get the first one's bundle.
      command: ['node', 'scripts/bundle.mjs', relativeEntry, '/asset-output'],
      local: {
        tryBundle(outputDir: string): boolean {
          execFileSync(process.execPath, [BUNDLE_SCRIPT, absoluteEntry, outputDir], { stdio: 'inherit' });
          return true;
        },
      },
    },
  });
}

export interface BundledFunctionProps extends Omit<lambda.FunctionProps, 'code' | 'handler' | 'runtime'> {
  /** The handler module, relative to the project root, e.g. `functions/processor.ts`. */
  readonly entry: string;
  /** The exported handler's name. */
  readonly handler: string;
  readonly runtime?: lambda.Runtime;
}

export const LAMBDA_RUNTIME = lambda.Runtime.NODEJS_24_X;

export class BundledFunction extends lambda.Function {
  constructor(scope: Construct, id: string, props: BundledFunctionProps) {
    const { entry, handler, ...rest } = props;
    super(scope, id, {
      runtime: LAMBDA_RUNTIME,
      ...rest,
      handler: `index.${handler}`,
      code: bundledCode(entry),
    });
  }
}

/**
 * A Lambda function bundled by `scripts/bundle.mjs` — the same bundling the benchmark measures — instead of
 * NodejsFunction's: minified ESM for the function's Node.js runtime with the project's locked AWS SDK v3 bundled
 * in (the SDK the tests ran, not the runtime's copy), and zod's unused message locales left out (NodejsFunction
 * cannot run esbuild plugins). Bundling runs locally with the project's esbuild: no Docker. Skipped, like any
 * asset bundling, when the stack is not being bundled (context `aws:cdk:bundling-stacks`).
 *
 * Each function also gets a log group and a role of its own, and the role may write logs only to that group:
 * no `AWSLambdaBasicExecutionRole`, whose log grant is on every log group of the account (`*`). X-Ray tracing
 * is active.
 */
import { execFileSync } from 'node:child_process';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AssetHashType, DockerImage, RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
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

/** The function's own log group. */
export interface FunctionLogOptions {
  /** Default one month. */
  readonly retention?: logs.RetentionDays;
  /** Default destroy. */
  readonly removalPolicy?: RemovalPolicy;
  /** A customer-managed key for the log group (its key policy must let CloudWatch Logs use it). */
  readonly encryptionKey?: kms.IKey;
}

export interface BundledFunctionProps
  extends Omit<lambda.FunctionProps, 'code' | 'handler' | 'runtime' | 'role' | 'logGroup' | 'tracing'> {
  /** The handler module, relative to the project root, e.g. `functions/processor.ts`. */
  readonly entry: string;
  /** The exported handler's name. */
  readonly handler: string;
  readonly runtime?: lambda.Runtime;
  readonly logs?: FunctionLogOptions;
}

export const LAMBDA_RUNTIME = lambda.Runtime.NODEJS_24_X;

/** The two actions a function needs to write its own logs (the group exists: the stack creates it). */
export const LOG_WRITE_ACTIONS = ['logs:CreateLogStream', 'logs:PutLogEvents'];

export class BundledFunction extends lambda.Function {
  /** The function's own log group: the only one its role may write to. */
  readonly logGroupOwn: logs.LogGroup;
  readonly executionRole: iam.Role;

  constructor(scope: Construct, id: string, props: BundledFunctionProps) {
    const { entry, handler, logs: logOptions, ...rest } = props;
    const logGroup = new logs.LogGroup(scope, `${id}Logs`, {
      retention: logOptions?.retention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: logOptions?.removalPolicy ?? RemovalPolicy.DESTROY,
      encryptionKey: logOptions?.encryptionKey,
    });
    const role = new iam.Role(scope, `${id}Role`, {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `Execution role of ${id}: writes only its own log group and what its step grants`,
    });
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'OwnLogGroupOnly',
        actions: LOG_WRITE_ACTIONS,
        // `logGroupArn` ends in `:*`: the group's streams, and nothing of any other group.
        resources: [logGroup.logGroupArn],
      }),
    );
    super(scope, id, {
      runtime: LAMBDA_RUNTIME,
      ...rest,
      role,
      logGroup,
      tracing: lambda.Tracing.ACTIVE,
      handler: `index.${handler}`,
      code: bundledCode(entry),
    });
    this.logGroupOwn = logGroup;
    this.executionRole = role;
  }
}

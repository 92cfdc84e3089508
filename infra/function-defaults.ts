/**
 * What every pipeline Lambda shares: Node.js 24 on ARM64, bundled by the local esbuild (no Docker), ESM output,
 * JSON logs into a log group with a retention, source maps for readable stacks.
 *
 * The AWS SDK is bundled rather than taken from the runtime: the pinned client versions the tests ran against are
 * the ones that deploy.
 */
import type { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { type NodejsFunctionProps, OutputFormat, SourceMapMode } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { METRICS_NAMESPACE, SERVICE_NAME } from '../shared/observability/names.ts';

export const LAMBDA_RUNTIME = lambda.Runtime.NODEJS_24_X;

export interface FunctionDefaultsOptions {
  readonly timeout: Duration;
  readonly memorySize: number;
  readonly logGroup: logs.ILogGroup;
  readonly environment: Record<string, string>;
}

export function functionDefaults(options: FunctionDefaultsOptions): NodejsFunctionProps {
  return {
    runtime: LAMBDA_RUNTIME,
    architecture: lambda.Architecture.ARM_64,
    timeout: options.timeout,
    memorySize: options.memorySize,
    logGroup: options.logGroup,
    loggingFormat: lambda.LoggingFormat.JSON,
    applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
    systemLogLevelV2: lambda.SystemLogLevel.WARN,
    environment: {
      ...options.environment,
      NODE_OPTIONS: '--enable-source-maps',
      POWERTOOLS_SERVICE_NAME: SERVICE_NAME,
      POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
    },
    bundling: {
      format: OutputFormat.ESM,
      target: 'node24',
      platform: 'node',
      mainFields: ['module', 'main'],
      minify: true,
      sourceMap: true,
      sourceMapMode: SourceMapMode.INLINE,
      sourcesContent: false,
      bundleAwsSDK: true,
      externalModules: [],
      // Some CommonJS dependencies call require(); ESM output needs it defined.
      banner:
        "import { createRequire as __eosCreateRequire } from 'node:module'; const require = __eosCreateRequire(import.meta.url);",
      forceDockerBundling: false,
    },
  };
}

export function functionLogGroup(
  scope: Construct,
  id: string,
  retentionDays: number,
  removalPolicy: RemovalPolicy,
): logs.LogGroup {
  return new logs.LogGroup(scope, id, {
    retention: retentionDays as logs.RetentionDays,
    removalPolicy,
  });
}

/**
 * What every pipeline Lambda shares: Node.js 24 on ARM64, JSON logs into a log group with a retention. The code
 * itself comes from {@link BundledFunction} (`scripts/bundle.mjs`: minified ESM, AWS SDK v3 from the runtime —
 * the benchmark measures exactly that bundle).
 */
import type { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { METRICS_NAMESPACE, SERVICE_NAME } from '../shared/observability/names.ts';
import { type BundledFunctionProps, LAMBDA_RUNTIME } from './bundled-function.ts';

/** Everything but the code: what the stack sets on every function. */
export type FunctionDefaults = Omit<BundledFunctionProps, 'entry' | 'handler'>;

export { LAMBDA_RUNTIME };

export interface FunctionDefaultsOptions {
  readonly timeout: Duration;
  readonly memorySize: number;
  readonly logGroup: logs.ILogGroup;
  readonly environment: Record<string, string>;
}

export function functionDefaults(options: FunctionDefaultsOptions): FunctionDefaults {
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
      POWERTOOLS_SERVICE_NAME: SERVICE_NAME,
      POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
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

/**
 * What every pipeline Lambda shares: Node.js 24 on ARM64, JSON logs into a log group of its own with a retention
 * (CMK-encrypted under `encryption=kms`). The code, the role and the log group come from {@link BundledFunction}
 * (`scripts/bundle.mjs`: minified ESM with the locked AWS SDK v3 bundled in — the benchmark measures exactly that
 * bundle).
 */
import type { Duration, RemovalPolicy } from 'aws-cdk-lib';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import { METRICS_NAMESPACE, SERVICE_NAME } from '../shared/observability/names.ts';
import { type BundledFunctionProps, LAMBDA_RUNTIME } from './bundled-function.ts';

/** Everything but the code: what the stack sets on every function. */
export type FunctionDefaults = Omit<BundledFunctionProps, 'entry' | 'handler'>;

export { LAMBDA_RUNTIME };

export interface FunctionDefaultsOptions {
  readonly timeout: Duration;
  readonly memorySize: number;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: RemovalPolicy;
  readonly logEncryptionKey?: kms.IKey;
  readonly environment: Record<string, string>;
}

export function functionDefaults(options: FunctionDefaultsOptions): FunctionDefaults {
  return {
    runtime: LAMBDA_RUNTIME,
    architecture: lambda.Architecture.ARM_64,
    timeout: options.timeout,
    memorySize: options.memorySize,
    logs: {
      retention: options.logRetention,
      removalPolicy: options.removalPolicy,
      encryptionKey: options.logEncryptionKey,
    },
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

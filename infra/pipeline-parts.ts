/**
 * The pieces of an `ExactlyOncePipeline` that the modules building it share (its functions, its grants, its
 * bucket's protection): the construct itself satisfies this, so they take it without importing the construct.
 */
import { Annotations, type Duration, type RemovalPolicy } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct, IConstruct } from 'constructs';
import type { PipelineConfig } from './config.ts';
import { type FunctionDefaults, functionDefaults } from './function-defaults.ts';
import type { KafkaSource } from './kafka-source.ts';

/** What is built before the pipeline's functions: its settings, source, ledger, bucket, key and environment. */
export interface PipelineParts extends Construct {
  readonly config: PipelineConfig;
  /** What the pipeline reads. */
  readonly source: KafkaSource;
  readonly table: dynamodb.ITable;
  readonly bucket: s3.IBucket;
  /** The pipeline's customer-managed key under `encryption: 'kms'`. */
  readonly encryptionKey?: kms.IKey;
  /** The `EOS_*` environment every function gets. */
  readonly environment: Record<string, string>;
  /** Set when the transform decodes with a Glue registry: the registries its processor may read (empty: any). */
  readonly glueSchemaReads?: { readonly registryNames: readonly string[] };
  /** The Secrets Manager secrets holding the transform's registry credentials; empty: none. */
  readonly registrySecretArns: readonly string[];
}

/** The settings every function of `parts` shares, with this timeout and memory size. */
export function pipelineFunctionDefaults(
  parts: Pick<PipelineParts, 'config' | 'encryptionKey'>,
  timeout: Duration,
  memorySize: number,
  removalPolicy: RemovalPolicy,
): FunctionDefaults {
  return functionDefaults({
    timeout,
    memorySize,
    logRetention: parts.config.logRetentionDays as logs.RetentionDays,
    removalPolicy,
    logEncryptionKey: parts.encryptionKey,
    environment: {},
  });
}

/** A synth warning on the pipeline: what it could not do itself, and what to add instead. */
export function warnPipeline(pipeline: IConstruct, id: string, message: string): void {
  Annotations.of(pipeline).addWarningV2(`exactly-once-pipeline:${id}`, message);
}

/**
 * The package's main entry (`import { ExactlyOncePipeline } from 'msk-exactly-once-pipeline'`): the construct, its
 * props and the Kafka source types, and the errors a bad setting fails synth with. The transform API is the other
 * entry, `msk-exactly-once-pipeline/transform` (`shared/transforms/api.ts`).
 */

export {
  InvalidSettingError,
  NotATransformError,
  PipelineError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../shared/errors.ts';
export { AnalyticsTable, type AnalyticsTableProps } from './analytics-table.ts';
export type { PipelineConfigInput } from './config.ts';
export {
  ExactlyOncePipeline,
  type ExactlyOncePipelineProps,
  type PipelineReplay,
  type ReplayProps,
  type ReplayStartingPosition,
  replayLeadingKeys,
  type TransformModule,
} from './exactly-once-pipeline.ts';
export { type IcebergProps, IcebergPublishTable } from './iceberg-table.ts';
export {
  KafkaAuthenticationMethod,
  type KafkaNetwork,
  type KafkaSource,
  type MskAuthentication,
  type MskSource,
  type SelfManagedKafkaAuthentication,
  type SelfManagedKafkaSource,
} from './kafka-source.ts';
export type { IdempotencyKeySetting, StartingPositionName } from './pipeline-props.ts';

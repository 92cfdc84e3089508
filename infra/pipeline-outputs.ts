/** Opt-in (`outputs: true`; the repository's stack sets it): the stack outputs an operator needs after a deploy. */
import { CfnOutput } from 'aws-cdk-lib';
import type { Construct } from 'constructs';

export interface PipelineOutputValues {
  readonly pipelineId: string;
  readonly tableName: string;
  readonly processorFunctionName: string;
  readonly bucketName: string;
  readonly stateMachineArn: string;
  /** The Express state machine the schedule starts (`coordinatorWorkflow: 'express'`). */
  readonly expressStateMachineArn?: string | undefined;
  readonly clusterArn?: string | undefined;
  readonly analytics?: {
    readonly databaseName: string;
    readonly tableName: string;
    readonly workgroupName: string;
  };
  /** The Iceberg table (the `iceberg` prop): its Glue `database.table`, else its location. */
  readonly iceberg?: { readonly table: string; readonly glue: boolean };
}

export function addPipelineOutputs(scope: Construct, values: PipelineOutputValues): void {
  new CfnOutput(scope, 'LedgerTableName', { value: values.tableName, description: 'The ledger table' });
  new CfnOutput(scope, 'ProcessorFunctionName', {
    value: values.processorFunctionName,
    description: 'The processor Lambda (invoke it with an MSK event when there is no event source mapping)',
  });
  if (values.analytics) {
    new CfnOutput(scope, 'AnalyticsTable', {
      value: `${values.analytics.databaseName}.${values.analytics.tableName}`,
      description: 'The Glue table over the committed output (query it in the workgroup below)',
    });
    new CfnOutput(scope, 'AthenaWorkGroup', { value: values.analytics.workgroupName });
  }
  if (values.iceberg) {
    new CfnOutput(scope, 'IcebergTable', {
      value: values.iceberg.table,
      description: values.iceberg.glue
        ? 'The Iceberg table each committed checkpoint is published to (Glue database.table; query it in Athena)'
        : 'The Iceberg table each committed checkpoint is published to (its location: a file-catalog table)',
    });
  }
  new CfnOutput(scope, 'BucketName', { value: values.bucketName, description: 'The sink bucket' });
  new CfnOutput(scope, 'StateMachineArn', {
    value: values.stateMachineArn,
    description: values.expressStateMachineArn
      ? 'The Standard checkpoint workflow: recoveries and retries after an abort (start it to take a checkpoint now)'
      : 'The checkpoint workflow (start it to take a checkpoint now)',
  });
  if (values.expressStateMachineArn) {
    new CfnOutput(scope, 'ExpressStateMachineArn', {
      value: values.expressStateMachineArn,
      description:
        'The Express checkpoint workflow the schedule starts (its executions are in its log group)',
    });
  }
  const clusterOption = values.clusterArn ? ` --cluster-arn ${values.clusterArn}` : '';
  if (values.clusterArn) {
    new CfnOutput(scope, 'ClusterArn', {
      value: values.clusterArn,
      description: 'The MSK cluster the pipeline reads',
    });
  }
  new CfnOutput(scope, 'StatusCommand', {
    description: 'Check the deployed pipeline',
    value: `npx eos status --pipeline ${values.pipelineId} --table ${values.tableName}${clusterOption}`,
  });
}

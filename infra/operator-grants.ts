/**
 * What the roles that run `eos epoch --start-new`, `eos redrive` and `eos replay` get (the `operatorRoles` prop):
 * the processor's side of the pipeline and the committed output, nothing of the coordinator's.
 */
import * as iam from 'aws-cdk-lib/aws-iam';
import { fenceLeadingKeys } from '../shared/ledger/fences.ts';
import { kafkaOffsetsStatements } from './kafka-cluster.ts';
import { usesIamAuth } from './kafka-source.ts';
import {
  claimLeadingKeys,
  keyWindowLeadingKeys,
  OPERATOR_REPLAY_PLAN_ACTIONS,
  PROCESSOR_CLAIM_INSERT_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
  processorLeadingKeys,
} from './ledger-access.ts';
import {
  grantDataKeys,
  grantLedger,
  grantTransformReads,
  processorObjectPrefixes,
} from './pipeline-grants.ts';
import type { PipelineParts } from './pipeline-parts.ts';
import { operatorPrincipal } from './principals.ts';
import { replayLeadingKeys } from './replay.ts';
import { sidOfPipeline } from './security.ts';

/** A pipeline as its operators are granted it: its parts and its committed output. */
export interface OperatedPipeline extends PipelineParts {
  grantReadCommitted(grantee: iam.IGrantable): iam.Grant;
}

/** Grants each of `roles` what operating `pipeline` takes, refusing (or pinning) a role of another account. */
export function grantOperators(pipeline: OperatedPipeline, roles: readonly iam.IRole[]): void {
  for (const operator of roles) {
    grantOperate(pipeline, operatorPrincipal(pipeline, pipeline.source, operator));
  }
}

/**
 * What `eos epoch --start-new`, `eos redrive` and `eos replay` need (the `operatorRoles` prop): the processor's ledger items
 * (and Query on fences and key windows: redrive reads every fence and the windows of partition scope), staging
 * under the in-progress prefixes (the bucket policy lets `operatorRoles` write there), the committed output, the
 * data keys, the replay plans (`eos replay` writes a plan before its replay mapping is deployed, and requests
 * the switch on it), and on an MSK source the topic's offsets at a time (`eos replay --from-timestamp`:
 * `kafkaOffsetsStatements`). Nothing of the coordinator's.
 */
function grantOperate(pipeline: OperatedPipeline, role: iam.IPrincipal): void {
  const { table, config, source } = pipeline;
  const pl = config.pipelineId;
  const sid = sidOfPipeline(pl);
  grantLedger(
    table,
    role,
    [...PROCESSOR_DYNAMODB_ACTIONS],
    processorLeadingKeys(pl),
    `OperateLedgerItems${sid}`,
  );
  grantLedger(
    table,
    role,
    [...PROCESSOR_CLAIM_INSERT_ACTIONS],
    claimLeadingKeys(pl),
    `OperateClaimInserts${sid}`,
    { keyRequired: true },
  );
  grantLedger(
    table,
    role,
    ['dynamodb:Query'],
    [...fenceLeadingKeys(pl), ...keyWindowLeadingKeys(pl)],
    `OperateLedgerQueries${sid}`,
  );
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: `OperateStageObjects${sid}`,
      actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
      resources: processorObjectPrefixes(config).map((prefix) => pipeline.bucket.arnForObjects(`${prefix}*`)),
    }),
  );
  pipeline.grantReadCommitted(role);
  grantDataKeys(pipeline, role, ['s3', 'dynamodb'], 'encrypt-decrypt');
  // `eos redrive` decodes dead letters again as the processor does: the same schema reads and credentials.
  grantTransformReads(pipeline, { grantPrincipal: role });
  grantLedger(
    table,
    role,
    [...OPERATOR_REPLAY_PLAN_ACTIONS],
    replayLeadingKeys(pl),
    `OperateReplayPlans${sid}`,
  );
  if (source.kind === 'msk') {
    const { clusterArn } = source;
    const iamAuth = usesIamAuth(source);
    for (const statement of kafkaOffsetsStatements(clusterArn, config.topic, iamAuth, sid)) {
      role.addToPrincipalPolicy(statement);
    }
  }
}

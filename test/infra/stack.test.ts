/**
 * Assertions on the synthesized stack: the Kafka mapping, IAM (least privilege), table, bucket, functions,
 * alarms, schedules, and the validation of settings.
 */
import { Duration } from 'aws-cdk-lib';
import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { parsePipelineConfig } from '../../infra/config.ts';
import { pipelinePropsFromContext } from '../../infra/stack.ts';
import { ENV_NAMES, settingsFromEnv } from '../../shared/config/settings.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { METRIC, METRICS_NAMESPACE, metricDimensionsMap } from '../../shared/observability/names.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import { evaluate, type PolicyStatement } from '../support/iam.ts';
import {
  actionsOf,
  allStatements,
  CLUSTER_ARN,
  type PolicyStatementJson,
  resourcesOf,
  resourcesOfStatement,
  synthesize,
  testApp,
} from '../support/infra.ts';

const base = synthesize();
const template = base.template;

describe('the Kafka event source mapping', () => {
  it('reads the topic from the imported cluster with the configured batching and consumer group', () => {
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: CLUSTER_ARN,
      Topics: ['orders'],
      BatchSize: 500,
      MaximumBatchingWindowInSeconds: 5,
      StartingPosition: 'TRIM_HORIZON',
      AmazonManagedKafkaEventSourceConfig: { ConsumerGroupId: 'eos-orders' },
      FunctionName: {
        Ref: base.stack.getLogicalId(base.stack.pipeline.processor.node.defaultChild as never),
      },
    });
  });

  it('takes its settings from props', () => {
    const { template: custom } = synthesize({
      batchSize: 2000,
      maxBatchingWindow: Duration.seconds(7),
      startingPosition: 'LATEST',
      consumerGroupId: 'my-group',
    });
    custom.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      BatchSize: 2000,
      MaximumBatchingWindowInSeconds: 7,
      StartingPosition: 'LATEST',
      AmazonManagedKafkaEventSourceConfig: { ConsumerGroupId: 'my-group' },
    });
  });

  it('grants the kafka-cluster data-plane actions on exactly the cluster, topic and group ARNs', () => {
    const kafka = allStatements(template).filter((s) =>
      actionsOf(s).some((a) => a.startsWith('kafka-cluster:')),
    );
    const byResource = Object.fromEntries(kafka.map((s) => [String(s.Resource), actionsOf(s).sort()]));
    expect(byResource).toEqual({
      [CLUSTER_ARN]: ['kafka-cluster:Connect', 'kafka-cluster:DescribeClusterDynamicConfiguration'],
      'arn:aws:kafka:eu-west-1:123456789012:topic/demo/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d-2/orders': [
        'kafka-cluster:DescribeTopic',
        'kafka-cluster:ReadData',
      ],
      'arn:aws:kafka:eu-west-1:123456789012:group/demo/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d-2/eos-orders': [
        'kafka-cluster:AlterGroup',
        'kafka-cluster:DescribeGroup',
      ],
    });
  });
});

describe('least privilege', () => {
  const statements = allStatements(template);

  it('never pairs an S3 or DynamoDB action with a wildcard resource', () => {
    const dataActions = statements.filter((s) => actionsOf(s).some((a) => /^(s3|dynamodb):/.test(a)));
    expect(dataActions.length).toBeGreaterThan(5);
    for (const statement of dataActions) {
      for (const resource of resourcesOfStatement(statement)) {
        expect(resource, `${statement.policy} ${actionsOf(statement)}`).not.toBe('*');
        expect(JSON.stringify(resource)).not.toMatch(/"\*"|:::\*|arn:aws:s3:::\*|table\/\*/);
      }
      for (const action of actionsOf(statement)) expect(action).not.toMatch(/\*/);
    }
  });

  it("conditions every DynamoDB statement on leading keys of the pipeline's own item kinds", () => {
    const dynamo = statements.filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:')));
    expect(dynamo.length).toBeGreaterThanOrEqual(9); // processor, monitor, 7 coordinator steps
    for (const statement of dynamo) {
      const leading = statement.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'] as string[];
      // `Null` only beside it, requiring the key, on the PartiQL statements (the processor's claim INSERTs, the
      // cleanup's staged-entry DELETEs): `ForAllValues` alone matches a request without one.
      const operators = Object.keys(statement.Condition ?? {});
      expect(operators.filter((o) => o !== 'Null')).toEqual(['ForAllValues:StringLike']);
      if (actionsOf(statement).some((action) => action.startsWith('dynamodb:PartiQL')))
        expect(operators).toContain('Null');
      if (operators.includes('Null')) {
        expect(statement.Condition?.Null).toEqual({ 'dynamodb:LeadingKeys': 'false' });
        const allowed = [
          JSON.stringify([['dynamodb:PartiQLInsert'], ['orders#CLAIM#*']]),
          JSON.stringify([['dynamodb:PartiQLDelete'], ['orders#STAGED#*']]),
        ];
        expect(allowed).toContain(JSON.stringify([actionsOf(statement), leading]));
      }
      expect(leading.length).toBeGreaterThan(0);
      for (const pattern of leading) expect(pattern).toMatch(/^orders#/);
      expect(actionsOf(statement)).not.toContain('dynamodb:Scan');
    }
    // No role reads every item kind: the monitor reads only what it reports from (test/infra/monitor-iam.test.ts).
    const everything = dynamo.filter((s) => JSON.stringify(s.Condition).includes('"orders#*"'));
    expect(everything).toEqual([]);
  });

  it('allows a claim INSERT only on a claim key the request names: never another item kind, never without a key', () => {
    const inserts = statements.filter((s) => actionsOf(s).includes('dynamodb:PartiQLInsert'));
    expect(inserts.length).toBeGreaterThan(0);
    const json = template.toJSON() as Parameters<typeof evaluate>[0];
    const table = String(resolveIntrinsics([inserts[0]!.Resource].flat()[0], json));
    const decide = (context: Record<string, string | string[]>) =>
      evaluate(json, statements as unknown as PolicyStatement[], [], {
        principal: 'arn:aws:iam::123456789012:role/any',
        action: 'dynamodb:PartiQLInsert',
        resource: table,
        context,
      });
    expect(decide({ 'dynamodb:LeadingKeys': ['orders#CLAIM#k-1'] })).toBe('allow');
    expect(decide({ 'dynamodb:LeadingKeys': ['orders#CHECKPOINT'] })).toBe('implicit-deny');
    expect(decide({ 'dynamodb:LeadingKeys': ['orders#FENCE#orders#0'] })).toBe('implicit-deny');
    expect(decide({})).toBe('implicit-deny');
  });

  it('scopes S3 object actions to the pipeline prefixes and lists only with a prefix condition', () => {
    for (const statement of statements.filter((s) => actionsOf(s).some((a) => a.startsWith('s3:')))) {
      if (actionsOf(statement).includes('s3:ListBucket')) {
        expect(statement.Condition?.StringLike?.['s3:prefix']).toBeDefined();
        continue;
      }
      for (const resource of resourcesOfStatement(statement)) {
        expect(JSON.stringify(resource)).toMatch(
          /"\/orders\/(_inprogress|_coordinator|_manifests|final)\/[^"]*\*"/,
        );
      }
    }
    expect(
      statements.flatMap(actionsOf).filter((a) => a.startsWith('s3:List') && a !== 's3:ListBucket'),
    ).toEqual([]);
  });

  it('lets the exactly-once processor write only staged objects, the weaker guarantees final ones too', () => {
    const processorS3 = (t: typeof template) =>
      allStatements(t)
        .filter((s) => s.Sid === 'StageObjects')
        .flatMap(resourcesOfStatement)
        .map((r) => JSON.stringify(r));
    expect(processorS3(template)).toEqual([
      expect.stringContaining('/orders/_inprogress/output/*'),
      expect.stringContaining('/orders/_inprogress/deadletter/*'),
    ]);
    const atLeastOnce = synthesize({ deliveryGuarantee: 'at-least-once' }).template;
    expect(processorS3(atLeastOnce)).toEqual([
      expect.stringContaining('/orders/_inprogress/output/*'),
      expect.stringContaining('/orders/_inprogress/deadletter/*'),
      expect.stringContaining('/orders/final/*'),
    ]);
  });
});

describe('the ledger table', () => {
  it('is on-demand with TTL, point-in-time recovery, deletion protection and retained by default', () => {
    template.hasResource('AWS::DynamoDB::Table', {
      DeletionPolicy: 'Retain',
      UpdateReplacePolicy: 'Retain',
      Properties: {
        BillingMode: 'PAY_PER_REQUEST',
        TimeToLiveSpecification: { AttributeName: 'expiresAt', Enabled: true },
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        DeletionProtectionEnabled: true,
        // Encrypted at rest with the AWS-owned key (no KMS requests billed) unless encryption=kms.
        SSESpecification: { SSEEnabled: false },
      },
    });
  });

  it('follows the settings for a sandbox: destroyed, unprotected, without PITR', () => {
    const sandbox = synthesize({
      removalPolicy: 'destroy',
      deletionProtection: false,
      pointInTimeRecovery: false,
    }).template;
    sandbox.hasResource('AWS::DynamoDB::Table', {
      DeletionPolicy: 'Delete',
      Properties: {
        DeletionProtectionEnabled: false,
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: false },
      },
    });
  });
});

describe('the sink bucket', () => {
  const bucketId = base.stack.getLogicalId(base.stack.pipeline.bucket.node.defaultChild as never);
  const bucket = resourcesOf(template, 'AWS::S3::Bucket')[bucketId]!;

  it('is versioned, private, encrypted, access-logged and retained', () => {
    expect(bucket.DeletionPolicy).toBe('Retain');
    expect(bucket.Properties).toMatchObject({
      VersioningConfiguration: { Status: 'Enabled' },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
      },
      LoggingConfiguration: { LogFilePrefix: 'sink/' },
    });
  });

  it('keeps noncurrent versions of committed objects a year, and expires in-progress and work objects as a backstop', () => {
    const rules = (bucket.Properties.LifecycleConfiguration as { Rules: Record<string, unknown>[] }).Rules;
    expect(rules).toContainEqual(
      expect.objectContaining({
        Id: 'expire-noncurrent-versions',
        NoncurrentVersionExpiration: { NoncurrentDays: 365 },
      }),
    );
    expect(rules).toContainEqual(
      expect.objectContaining({
        Id: 'backstop-expire-coordinator-work-orders',
        Prefix: 'orders/_coordinator/',
        ExpirationInDays: 30,
        NoncurrentVersionExpiration: { NoncurrentDays: 3 },
      }),
    );
    expect(rules).toContainEqual(
      expect.objectContaining({
        Id: 'backstop-expire-in-progress-orders',
        Prefix: 'orders/_inprogress/',
        ExpirationInDays: 30,
      }),
    );
    expect(rules).toContainEqual(
      expect.objectContaining({
        Id: 'expire-noncurrent-in-progress-orders',
        Prefix: 'orders/_inprogress/',
        NoncurrentVersionExpiration: { NoncurrentDays: 3 },
      }),
    );
    // Nothing expires final objects or manifests (C7).
    const expiring = rules.filter((rule) => rule.ExpirationInDays !== undefined).map((rule) => rule.Prefix);
    expect(expiring.sort()).toEqual(['orders/_coordinator/', 'orders/_inprogress/']);
  });

  it('denies requests without TLS', () => {
    template.hasResourceProperties('AWS::S3::BucketPolicy', {
      Bucket: { Ref: bucketId },
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ]),
      },
    });
  });

  it('uses a rotated customer-managed key for bucket, table and topic when encryption is kms', () => {
    const kms = synthesize({ encryption: 'kms' });
    const keyId = kms.stack.getLogicalId(kms.stack.pipeline.encryptionKey!.node.defaultChild as never);
    kms.template.hasResourceProperties('AWS::KMS::Key', { EnableKeyRotation: true });
    kms.template.hasResourceProperties('AWS::S3::Bucket', {
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [
          {
            BucketKeyEnabled: true,
            ServerSideEncryptionByDefault: {
              SSEAlgorithm: 'aws:kms',
              KMSMasterKeyID: { 'Fn::GetAtt': [keyId, 'Arn'] },
            },
          },
        ],
      },
    });
    kms.template.hasResourceProperties('AWS::DynamoDB::Table', {
      SSESpecification: {
        SSEEnabled: true,
        SSEType: 'KMS',
        KMSMasterKeyId: { 'Fn::GetAtt': [keyId, 'Arn'] },
      },
    });
    kms.template.hasResourceProperties('AWS::SNS::Topic', {
      KmsMasterKeyId: { 'Fn::GetAtt': [keyId, 'Arn'] },
    });
  });
});

describe('the functions', () => {
  const functions = Object.values(resourcesOf(template, 'AWS::Lambda::Function'));

  it('run Node.js 24 on ARM64 with JSON logs, every one of them', () => {
    expect(functions).toHaveLength(9); // processor, monitor, 7 coordinator steps
    for (const fn of functions) {
      expect(fn.Properties).toMatchObject({
        Runtime: 'nodejs24.x',
        Architectures: ['arm64'],
        LoggingConfig: { LogFormat: 'JSON' },
      });
    }
  });

  it('carry EOS_* settings that the handlers parse back (no unknown EOS_ variable)', () => {
    for (const fn of functions) {
      const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
      const plain = Object.fromEntries(
        Object.entries(env).map(([name, value]) => [
          name,
          typeof value === 'string' ? value : `resolved-${name.toLowerCase()}`,
        ]),
      );
      const settings = settingsFromEnv(plain);
      expect(settings).toMatchObject({ pipelineId: 'orders', deliveryGuarantee: 'exactly-once' });
      expect(env[ENV_NAMES.ledgerTable]).toEqual({ Ref: expect.stringMatching(/^PipelineLedger/) });
      expect(env[ENV_NAMES.bucket]).toEqual({ Ref: expect.stringMatching(/^PipelineSink[0-9A-F]/) });
    }
  });

  it('give the processor the configured timeout and the coordinator steps theirs', () => {
    const custom = synthesize({
      processorTimeout: Duration.minutes(5),
      orphanGrace: Duration.minutes(15),
      coordinatorStepTimeout: Duration.minutes(2),
    });
    const processorId = custom.stack.getLogicalId(custom.stack.pipeline.processor.node.defaultChild as never);
    const byId = resourcesOf(custom.template, 'AWS::Lambda::Function');
    expect(byId[processorId]!.Properties.Timeout).toBe(300);
    const begin = custom.stack.getLogicalId(
      custom.stack.pipeline.coordinator.functions.begin.node.defaultChild as never,
    );
    expect(byId[begin]!.Properties.Timeout).toBe(120);
  });
});

describe('schedules and alarms', () => {
  it('start a checkpoint (the Express workflow by default) and the monitor every checkpoint interval', () => {
    const coordinator = base.stack.pipeline.coordinator;
    expect(coordinator.scheduledStateMachine).toBe(coordinator.expressStateMachine);
    const sm = base.stack.getLogicalId(coordinator.expressStateMachine!.node.defaultChild as never);
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { Ref: sm } })],
    });
    const monitor = base.stack.getLogicalId(base.stack.pipeline.monitor.node.defaultChild as never);
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [monitor, 'Arn'] } })],
    });
    const custom = synthesize({ checkpointInterval: Duration.minutes(5) }).template;
    expect(
      Object.values(resourcesOf(custom, 'AWS::Events::Rule')).map((r) => r.Properties.ScheduleExpression),
    ).toEqual(['rate(5 minutes)', 'rate(5 minutes)']);
    const standard = synthesize({ coordinatorWorkflow: 'standard' });
    const only = standard.stack.pipeline.coordinator;
    expect(only.expressStateMachine).toBeUndefined();
    expect(Object.keys(resourcesOf(standard.template, 'AWS::StepFunctions::StateMachine'))).toHaveLength(1);
    const standardId = standard.stack.getLogicalId(only.stateMachine.node.defaultChild as never);
    standard.template.hasResourceProperties('AWS::Events::Rule', {
      Targets: [Match.objectLike({ Arn: { Ref: standardId } })],
    });
  });

  it('let the Express workflow start the Standard one, and nothing else start it', () => {
    const coordinator = base.stack.pipeline.coordinator;
    const standardId = base.stack.getLogicalId(coordinator.stateMachine.node.defaultChild as never);
    const express = resourcesOf(template, 'AWS::StepFunctions::StateMachine');
    const expressMachine = Object.values(express).find((m) => m.Properties.StateMachineType === 'EXPRESS')!;
    const roleId = (expressMachine.Properties.RoleArn as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const starts = Object.values(resourcesOf(template, 'AWS::IAM::Policy')).flatMap((policy) =>
      (
        policy.Properties.PolicyDocument as { Statement: Array<{ Action: unknown; Resource: unknown }> }
      ).Statement.filter((st) => [st.Action].flat().includes('states:StartExecution')).map((st) => ({
        roles: policy.Properties.Roles,
        resource: st.Resource,
      })),
    );
    // The schedule's role starts the Express one; only the Express one's role may start the Standard one.
    expect(starts.filter((start) => JSON.stringify(start.resource).includes(standardId))).toEqual([
      { roles: [{ Ref: roleId }], resource: { Ref: standardId } },
    ]);
  });

  it('start no checkpoint under the weaker guarantees, which stage nothing; the monitor still runs', () => {
    for (const deliveryGuarantee of ['at-least-once', 'none'] as const) {
      const weaker = synthesize({ deliveryGuarantee });
      expect(weaker.stack.pipeline.coordinator.schedule).toBeUndefined();
      const monitor = weaker.stack.getLogicalId(weaker.stack.pipeline.monitor.node.defaultChild as never);
      expect(
        Object.values(resourcesOf(weaker.template, 'AWS::Events::Rule')).map((r) => r.Properties.Targets),
      ).toEqual([[expect.objectContaining({ Arn: { 'Fn::GetAtt': [monitor, 'Arn'] } })]]);
    }
  });

  const alarms = Object.values(resourcesOf(template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties);
  const alarm = (suffix: string) => alarms.find((a) => a.AlarmName === `eos-orders-${suffix}`)!;
  const topicId = base.stack.getLogicalId(base.stack.pipeline.alarmTopic.node.defaultChild as never);

  it('alarm on failed checkpoints, no commit, dead-lettered records, processor errors and source or key anomalies, all to the topic', () => {
    expect(alarms.map((a) => a.AlarmName).sort()).toEqual(
      [
        'CheckpointFailed',
        'DuplicateKeyBurst',
        'EventRejected',
        'FenceJump',
        'IdempotencyKeyConflict',
        'NoCommit',
        'OffsetLagHigh',
        'OffsetsWentBackwards',
        'ProcessorErrors',
        'RecordDeadLettered',
      ].map((n) => `eos-orders-${n}`),
    );
    for (const a of alarms) {
      expect(a.AlarmActions).toEqual([{ Ref: topicId }]);
      expect(a.OKActions).toEqual([{ Ref: topicId }]);
    }
  });

  it('watch the EMF metrics under exactly the namespace and dimensions the handlers emit', () => {
    // CloudWatch matches dimensions as a set; CDK sorts them by name.
    const dimensions = Object.entries(metricDimensionsMap('orders'))
      .map(([Name, Value]) => ({ Name, Value }))
      .sort((a, b) => a.Name.localeCompare(b.Name));
    expect(alarm('RecordDeadLettered')).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      MetricName: METRIC.deadLettered,
      Dimensions: dimensions,
      Statistic: 'Sum',
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(alarm('NoCommit')).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      MetricName: METRIC.oldestUncommittedStagedAge,
      Dimensions: dimensions,
      Statistic: 'Maximum',
      Period: 60,
      Threshold: 3 * 60,
      ComparisonOperator: 'GreaterThanThreshold',
      // The monitor going silent must alarm too.
      TreatMissingData: 'breaching',
    });
  });

  it('count failed, timed-out and aborted executions of either workflow as failed checkpoints', () => {
    const metrics = alarm('CheckpointFailed').Metrics as Array<{
      Id: string;
      MetricStat?: { Metric: { MetricName: string; Namespace: string } };
    }>;
    expect(
      metrics
        .filter((m) => m.MetricStat)
        .map((m) => `${m.MetricStat!.Metric.Namespace}/${m.MetricStat!.Metric.MetricName}`)
        .sort(),
    ).toEqual([
      'AWS/States/ExecutionsAborted',
      'AWS/States/ExecutionsAborted',
      'AWS/States/ExecutionsFailed',
      'AWS/States/ExecutionsFailed',
      'AWS/States/ExecutionsTimedOut',
      'AWS/States/ExecutionsTimedOut',
    ]);
  });

  it("alarm on the processor function's errors, less the unproven redeliveries it fails on purpose", () => {
    const processorId = base.stack.getLogicalId(base.stack.pipeline.processor.node.defaultChild as never);
    const metrics = alarm('ProcessorErrors').Metrics as Array<{
      Id: string;
      Expression?: string;
      MetricStat?: { Metric: { MetricName: string; Namespace: string; Dimensions: unknown[] } };
    }>;
    const byId = new Map(metrics.map((m) => [m.Id, m]));
    expect(byId.get('errors')?.MetricStat?.Metric).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: 'Errors',
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: processorId } }],
    });
    expect(byId.get('unproven')?.MetricStat?.Metric.MetricName).toBe('UnprovenRedeliveries');
    const expression = metrics.find((m) => m.Expression)?.Expression;
    expect(expression).toBe('MAX([FILL(errors, 0) - FILL(unproven, 0), 0 * FILL(errors, 0)])');
  });

  it('have a dashboard and an email subscription when asked', () => {
    template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
    template.resourceCountIs('AWS::SNS::Subscription', 0);
    synthesize({ alarmEmail: 'ops@example.com' }).template.hasResourceProperties('AWS::SNS::Subscription', {
      Protocol: 'email',
      Endpoint: 'ops@example.com',
    });
  });
});

describe('an MSK Serverless sandbox', () => {
  const sandbox = synthesize({ mskClusterArn: undefined, mskVpcId: undefined, sandboxCluster: true });

  it('creates the cluster with IAM authentication in a VPC of its own and reads from it', () => {
    const clusterId = sandbox.stack.getLogicalId(sandbox.stack.pipeline.sandbox!.cluster);
    sandbox.template.hasResourceProperties('AWS::MSK::ServerlessCluster', {
      ClientAuthentication: { Sasl: { Iam: { Enabled: true } } },
      VpcConfigs: [Match.objectLike({ SubnetIds: Match.anyValue() })],
    });
    sandbox.template.resourceCountIs('AWS::EC2::VPC', 1);
    sandbox.template.resourceCountIs('AWS::EC2::FlowLog', 1);
    sandbox.template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [clusterId, 'Arn'] },
    });
  });

  it('derives the topic and group ARNs from the cluster ARN token', () => {
    const topic = allStatements(sandbox.template).find((s) => s.Sid === 'KafkaReadTopic')!;
    expect(JSON.stringify(topic.Resource)).toContain(':topic/');
    expect(JSON.stringify(topic.Resource)).toContain('"/orders"');
    expect(JSON.stringify(topic.Resource)).toContain('Fn::Split');
  });
});

describe('settings validation', () => {
  const invalid = (props: Record<string, unknown>) => () =>
    parsePipelineConfig({ mskClusterArn: CLUSTER_ARN, topic: 'orders', ...props });

  it.each([
    [{ topic: undefined }, 'topic', /required/],
    [{ topic: 'no spaces please' }, 'topic', /\[a-zA-Z0-9._-\]/],
    [{ mskClusterArn: 'arn:aws:kafka:eu-west-1:123:cluster/x' }, 'mskClusterArn', /arn:aws:kafka/],
    [{ mskClusterArn: undefined }, 'mskClusterArn', /sandboxCluster/],
    [{ sandboxCluster: true }, 'sandboxCluster', /not both/],
    [{ batchSize: 20_000 }, 'batchSize', /10000/],
    [{ batchSize: 'many' }, 'batchSize', /number.*\(got "many"\)/],
    [{ startingPosition: 'EARLIEST' }, 'startingPosition', /TRIM_HORIZON/],
    [
      { startingPosition: 'AT_TIMESTAMP' },
      'startingPositionTimestamp',
      /required with startingPosition AT_TIMESTAMP/,
    ],
    [
      { startingPositionTimestamp: 1_767_225_600 },
      'startingPositionTimestamp',
      /only used with .*AT_TIMESTAMP/,
    ],
    [
      { startingPosition: 'AT_TIMESTAMP', startingPositionTimestamp: '2026-01-01 00:00' },
      'startingPositionTimestamp',
      /ISO 8601 time with zone/,
    ],
    [{ minimumPollers: 10, maximumPollers: 5 }, 'minimumPollers', /exceeds maximumPollers \(5\)/],
    [{ maximumPollers: 2001 }, 'maximumPollers', /2000/],
    [{ deliveryGuarantee: 'twice' }, 'deliveryGuarantee', /exactly-once/],
    [
      { processorTimeoutSeconds: 600, orphanGraceSeconds: 600 },
      'orphanGraceSeconds',
      /must exceed processorTimeoutSeconds/,
    ],
    [{ checkpointLeaseSeconds: 360 }, 'checkpointLeaseSeconds', /must exceed the longest coordinator step/],
    [
      { inProgressExpirationDays: 1, orphanGraceSeconds: 86_400 },
      'inProgressExpirationDays',
      /must exceed twice/,
    ],
    [{ logRetentionDays: 31 }, 'logRetentionDays', /one of/],
    [{ alarmEmail: 'not-an-email' }, 'alarmEmail', /email/i],
    [{ bukcet: 'typo' }, 'bukcet', /unknown setting/],
  ])('rejects %j naming %s', (props, setting, message) => {
    const attempt = invalid(props);
    expect(attempt).toThrow(InvalidSettingError);
    expect(attempt).toThrow(new RegExp(`^invalid setting ${setting}: `));
    expect(attempt).toThrow(message);
  });

  it('accepts the defaults and coerces context strings', () => {
    const config = parsePipelineConfig({
      mskClusterArn: CLUSTER_ARN,
      topic: 'orders',
      batchSize: '50',
      gzip: 'false',
    });
    expect(config).toMatchObject({
      batchSize: 50,
      gzip: false,
      consumerGroupId: 'eos-orders',
      checkpointIntervalMinutes: 1,
    });
  });

  it('names a context setting the way it is passed on the command line', () => {
    const app = testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders', batchSize: '0' });
    expect(() => pipelinePropsFromContext(app)).toThrow(/^invalid setting -c batchSize: /);
    const missing = testApp({ mskClusterArn: CLUSTER_ARN });
    expect(() => pipelinePropsFromContext(missing)).toThrow('invalid setting -c topic: required but not set');
    const typo = testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders', batchsize: '1000' });
    expect(() => pipelinePropsFromContext(typo)).toThrow(
      'invalid setting -c batchsize: unknown setting (did you mean batchSize?)',
    );
    expect(
      pipelinePropsFromContext(testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders', stackName: 'x' })),
    ).toEqual({
      mskClusterArn: CLUSTER_ARN,
      topic: 'orders',
    });
  });
});

describe('alarm notifications', () => {
  it('let CloudWatch alarms of this pipeline publish to the SSL-only alarm topic (a topic policy replaces the default)', () => {
    for (const encryption of ['s3', 'kms'] as const) {
      const { stack, template } = synthesize({ encryption });
      const topicId = stack.getLogicalId(stack.pipeline.alarmTopic.node.defaultChild as never);
      const policies = Object.values(resourcesOf(template, 'AWS::SNS::TopicPolicy')).filter((p) =>
        JSON.stringify(p.Properties.Topics).includes(topicId),
      );
      const statements = policies.flatMap(
        (p) => (p.Properties.PolicyDocument as { Statement: PolicyStatementJson[] }).Statement,
      );
      const allow = statements.find(
        (s) =>
          s.Effect === 'Allow' &&
          JSON.stringify(s).includes('cloudwatch.amazonaws.com') &&
          JSON.stringify(s.Action).includes('sns:Publish'),
      );
      expect(allow, encryption).toBeDefined();
      expect(JSON.stringify(allow!.Condition)).toContain('aws:SourceAccount');
      // Each alarm by name: a wildcard eos-orders-* would match pipeline orders-eu's alarms too.
      const sources = JSON.stringify(allow!.Condition?.ArnEquals?.['aws:SourceArn']);
      expect(sources).not.toContain('*');
      expect(sources).toContain(':alarm:eos-orders-CheckpointFailed');
      expect(sources).toContain(':alarm:eos-orders-DuplicateKeyBurst');
      expect(sources).not.toContain('orders-eu');
    }
  });
});

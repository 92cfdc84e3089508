/**
 * The construct's API: props in CDK idiom mapped onto the validated settings (and refused at compile
 * time when mistyped), opt-in outputs, `grantReadCommitted`, the `metric…` methods, and several pipelines sharing
 * one table and one bucket — each pipeline's roles reach only its own ledger keys and prefixes, judged on the
 * synthesized template by the IAM model of `support/iam.ts` (identity policy and bucket policy together).
 */
import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { describe, expect, it } from 'vitest';
import { CONFIG_KEYS } from '../../infra/config.ts';
import { ExactlyOncePipeline, type ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { acknowledgeNagFindings, unacknowledgedNagFindings } from '../../infra/nag.ts';
import { PROP_OF_SETTING } from '../../infra/prop-names.ts';
import { pipelinePropsFromContext } from '../../infra/stack.ts';
import { COORDINATOR_STEPS } from '../../shared/coordinator/definition.ts';
import { checkpointWorkPrefix } from '../../shared/coordinator/work-objects.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { finalPrefix, manifestsPrefix, stagedStreamPrefix } from '../../shared/sink/layout.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import {
  type AccessRequest,
  bucketPolicyStatements,
  evaluate,
  type PolicyStatement,
  roleArnOf,
  roleStatements,
} from '../support/iam.ts';
import { BASE_PROPS, CLUSTER_ARN, resourcesOf, testApp } from '../support/infra.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

function actionsOfStatement(statement: PolicyStatement): unknown[] {
  return [statement.Action].flat();
}

function newStack(): Stack {
  return new Stack(testApp(), 'Api', { env: { account: '123456789012', region: 'eu-west-1' } });
}

function pipelineIn(stack: Stack, props: Partial<ExactlyOncePipelineProps> = {}, id = 'Pipeline') {
  return new ExactlyOncePipeline(stack, id, { ...BASE_PROPS, ...props });
}

describe('props in CDK idiom', () => {
  it('refuses mistyped props at compile time, and at synth for JavaScript callers', () => {
    const cases: Array<[() => unknown, RegExp]> = [
      // @ts-expect-error batchSize is a number: zod's coerced input type would accept this
      [() => pipelineIn(newStack(), { batchSize: 'lots' }), /^invalid setting batchSize: /],
      // @ts-expect-error a timeout is a Duration, not seconds
      [() => pipelineIn(newStack(), { processorTimeout: 300 }), /processorTimeout: expected a Duration/],
      // @ts-expect-error the guarantee is one of three
      [() => pipelineIn(newStack(), { deliveryGuarantee: 'twice' }), /deliveryGuarantee/],
      // @ts-expect-error an idempotency key source is header:<name>, json:<field>, transform or none
      [() => pipelineIn(newStack(), { idempotencyKey: 'header' }), /idempotencyKey/],
      // @ts-expect-error a bucket cannot be snapshotted
      [() => pipelineIn(newStack(), { removalPolicy: 'snapshot' }), /RemovalPolicy.RETAIN or/],
    ];
    for (const [attempt, message] of cases) {
      expect(attempt).toThrow(InvalidSettingError);
      expect(attempt).toThrow(message);
    }
  });

  it('takes Durations, RemovalPolicy and RetentionDays into the template', () => {
    const stack = newStack();
    const pipeline = pipelineIn(stack, {
      processorTimeout: Duration.minutes(5),
      orphanGrace: Duration.minutes(15),
      coordinatorStepTimeout: Duration.minutes(2),
      checkpointInterval: Duration.minutes(5),
      maxBatchingWindow: Duration.seconds(10),
      removalPolicy: RemovalPolicy.DESTROY,
      deletionProtection: false,
      logRetention: logs.RetentionDays.ONE_WEEK,
    });
    const template = Template.fromStack(stack);
    const functions = resourcesOf(template, 'AWS::Lambda::Function');
    const idOf = (construct: { node: { defaultChild?: unknown } }) =>
      stack.getLogicalId(construct.node.defaultChild as never);
    expect(functions[idOf(pipeline.processor)]!.Properties.Timeout).toBe(300);
    expect(functions[idOf(pipeline.coordinator.functions.begin)]!.Properties.Timeout).toBe(120);
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', { MaximumBatchingWindowInSeconds: 10 });
    expect(
      Object.values(resourcesOf(template, 'AWS::Events::Rule')).map((r) => r.Properties.ScheduleExpression),
    ).toEqual(['rate(5 minutes)', 'rate(5 minutes)']);
    template.hasResource('AWS::DynamoDB::Table', { DeletionPolicy: 'Delete' });
    const retentions = Object.values(resourcesOf(template, 'AWS::Logs::LogGroup')).map(
      (group) => group.Properties.RetentionInDays,
    );
    expect(retentions.length).toBeGreaterThan(0);
    expect(new Set(retentions)).toEqual(new Set([7]));
    expect(pipeline.config).toMatchObject({
      processorTimeoutSeconds: 300,
      orphanGraceSeconds: 900,
      checkpointIntervalMinutes: 5,
      removalPolicy: 'destroy',
    });
  });

  it.each([
    [
      { checkpointInterval: Duration.seconds(90) },
      /^invalid setting checkpointInterval: .*whole number of minutes/,
    ],
    [
      { processorTimeout: Duration.millis(1500) },
      /^invalid setting processorTimeout: .*whole number of seconds/,
    ],
    [{ processorTimeout: Duration.seconds(5) }, /^invalid setting processorTimeout \(seconds\): .*>=10/],
    [
      { processorTimeout: Duration.minutes(10), orphanGrace: Duration.minutes(10) },
      /^invalid setting orphanGrace \(seconds\): 600s must exceed processorTimeout \(600s\)/,
    ],
    [{ removalPolicy: RemovalPolicy.SNAPSHOT }, /^invalid setting removalPolicy: /],
    [
      { encryption: 's3' as const, encryptionKey: {} as kms.IKey },
      /^invalid setting encryptionKey: cannot be combined with encryption 's3'/,
    ],
  ])('refuses %o naming the prop', (props, message) => {
    const attempt = () => pipelineIn(newStack(), props);
    expect(attempt).toThrow(InvalidSettingError);
    expect(attempt).toThrow(message);
  });

  it("refuses a JavaScript caller's unknown prop instead of ignoring it", () => {
    const old = { ...BASE_PROPS, processorTimeoutSeconds: 300 } as ExactlyOncePipelineProps;
    expect(() => new ExactlyOncePipeline(newStack(), 'P', old)).toThrow(
      'invalid setting processorTimeoutSeconds: unknown prop (did you mean processorTimeout?)',
    );
  });

  it('has a prop for every deployment setting, and the context path gives the same props', () => {
    // outputColumns is derived by the construct from the transform, not chosen by the user: no key.
    const withoutProp = CONFIG_KEYS.filter((key) => !PROP_OF_SETTING[key]);
    expect(withoutProp).toEqual([]);
    const props = pipelinePropsFromContext(
      testApp({
        mskClusterArn: CLUSTER_ARN,
        topic: 'orders',
        processorTimeoutSeconds: '300',
        orphanGraceSeconds: '900',
        checkpointIntervalMinutes: '5',
        inProgressExpirationDays: '40',
        removalPolicy: 'destroy',
        logRetentionDays: '7',
        batchSize: '50',
        transform: './my-transform.ts#pageViews',
      }),
    );
    expect(props.processorTimeout?.toSeconds()).toBe(300);
    expect(props.orphanGrace?.toSeconds()).toBe(900);
    expect(props.checkpointInterval?.toMinutes()).toBe(5);
    expect(props.inProgressExpiration?.toDays()).toBe(40);
    expect(props).toMatchObject({
      removalPolicy: RemovalPolicy.DESTROY,
      logRetention: logs.RetentionDays.ONE_WEEK,
      batchSize: 50,
      transform: './my-transform.ts#pageViews',
    });
    expect(Object.keys(props).sort()).toEqual(
      [
        'batchSize',
        'checkpointInterval',
        'inProgressExpiration',
        'logRetention',
        'mskClusterArn',
        'orphanGrace',
        'processorTimeout',
        'removalPolicy',
        'topic',
        'transform',
      ].sort(),
    );
  });

  it('adds outputs only when asked (the repository stack asks)', () => {
    const quiet = newStack();
    pipelineIn(quiet);
    expect(Template.fromStack(quiet).findOutputs('*')).toEqual({});
    const loud = newStack();
    pipelineIn(loud, { outputs: true });
    const outputs = Object.keys(Template.fromStack(loud).findOutputs('*'));
    expect(outputs.some((id) => id.includes('StatusCommand'))).toBe(true);
    expect(outputs.some((id) => id.includes('BucketName'))).toBe(true);
  });

  it('uses a key it is given instead of creating one', () => {
    const stack = newStack();
    const key = new kms.Key(stack, 'MyKey', { enableKeyRotation: true });
    const pipeline = pipelineIn(stack, { encryptionKey: key });
    const template = Template.fromStack(stack);
    template.resourceCountIs('AWS::KMS::Key', 1);
    expect(pipeline.encryptionKey).toBe(key);
    expect(pipeline.bucket.encryptionKey).toBe(key);
    expect(pipeline.table.encryptionKey).toBe(key);
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      SSESpecification: { SSEEnabled: true, KMSMasterKeyId: Match.anyValue() },
    });
  });
});

/** What the IAM model needs of one pipeline's roles in a template. */
function rolesOf(stack: Stack, pipeline: ExactlyOncePipeline) {
  const functions = [
    ['processor', pipeline.processor],
    ['monitor', pipeline.monitor],
    ...COORDINATOR_STEPS.map((step) => [step, pipeline.coordinator.functions[step]] as const),
  ] as const;
  return functions.map(([name, fn]) => ({
    name,
    logicalId: stack.getLogicalId(fn.node.defaultChild as never),
  }));
}

/** One representative object under each prefix a pipeline writes or reads. */
function objectsOf(pl: string) {
  return {
    stagedOutput: `${stagedStreamPrefix(pl, 'output')}orders+3+100-199.attempt-1.ndjson.gz`,
    stagedDeadLetter: `${stagedStreamPrefix(pl, 'deadletter')}orders+3+100-199.attempt-1.ndjson.gz`,
    work: `${checkpointWorkPrefix(pl)}00000000000000000007/plan.json`,
    final: `${finalPrefix(pl)}output/orders+3+100-199.ndjson.gz`,
    manifest: `${manifestsPrefix(pl)}00000000000000000007.json`,
  };
}

/** One representative partition key of each item kind of a pipeline. */
function itemsOf(pl: string) {
  return {
    fence: keys.fence(pl, 'orders', 3).pk,
    stagedEntry: keys.stagedPk(pl, 'orders', 3),
    claim: keys.claim(pl, 'order-42').pk,
    state: keys.state(pl, 'customer-1').pk,
    checkpointHead: keys.checkpointHead(pl).pk,
    checkpointRecord: keys.checkpoint(pl, 7).pk,
    cutPage: keys.cutPagesPk(pl, 'cut-1'),
  };
}

const OBJECT_ACTIONS = ['s3:PutObject', 's3:GetObject', 's3:DeleteObject', 's3:PutObjectAcl'];
const ITEM_ACTIONS = [
  'dynamodb:GetItem',
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:DeleteItem',
  'dynamodb:Query',
];

describe('two pipelines sharing one table and one bucket', () => {
  const stack = newStack();
  const orders = pipelineIn(stack, { pipelineId: 'orders' }, 'Orders');
  const payments = pipelineIn(
    stack,
    { pipelineId: 'orders-eu', topic: 'orders-eu', table: orders.table, bucket: orders.bucket },
    'OrdersEu',
  );
  acknowledgeNagFindings(orders);
  acknowledgeNagFindings(payments);
  const template = Template.fromStack(stack);
  const json = template.toJSON() as TemplateJson;
  const bucketId = stack.getLogicalId(orders.bucket.node.defaultChild as never);
  const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, json));
  const tableId = stack.getLogicalId(orders.table.node.defaultChild as never);
  const tableArn = String(resolveIntrinsics({ 'Fn::GetAtt': [tableId, 'Arn'] }, json));
  const bucketPolicy = bucketPolicyStatements(json, bucketId);
  const decide = (roleId: string, action: string, resource: string, context: AccessRequest['context']) =>
    evaluate(
      json,
      roleStatements(json, roleId) as PolicyStatement[],
      resource.startsWith(bucketArn) ? bucketPolicy : [],
      { principal: roleArnOf(json, roleId), action, resource, context },
    );
  // The pipeline's puts of manifests and final objects are write-once (`If-None-Match: *`).
  const onObject = (roleId: string, action: string, key: string) =>
    decide(roleId, action, `${bucketArn}/${key}`, { 'aws:SecureTransport': 'true', 's3:if-none-match': '*' });
  const onItem = (roleId: string, action: string, pk: string) =>
    decide(roleId, action, tableArn, { 'dynamodb:LeadingKeys': [pk] });

  it('makes one table and one sink bucket (plus its access-log bucket), used by both', () => {
    template.resourceCountIs('AWS::DynamoDB::Table', 1);
    template.resourceCountIs('AWS::S3::Bucket', 2);
    expect(payments.table).toBe(orders.table);
    expect(payments.bucket).toBe(orders.bucket);
    expect(payments.accessLogsBucket).toBeUndefined();
    expect(payments.bucketPolicyAdded).toBe(true);
    expect(payments.environment.EOS_LEDGER_TABLE).toBe(orders.environment.EOS_LEDGER_TABLE);
    expect(payments.environment.EOS_BUCKET).toBe(orders.environment.EOS_BUCKET);
    expect(payments.environment.EOS_PIPELINE_ID).toBe('orders-eu');
  });

  it("puts both pipelines' lifecycle rules and write boundaries on the bucket, under distinct ids", () => {
    const bucket = resourcesOf(template, 'AWS::S3::Bucket')[bucketId]!;
    const rules = (
      bucket.Properties.LifecycleConfiguration as { Rules: Array<{ Id: string; Prefix?: string }> }
    ).Rules;
    for (const pl of ['orders', 'orders-eu']) {
      expect(rules.filter((rule) => rule.Prefix?.startsWith(`${pl}/`)).map((rule) => rule.Id)).toEqual([
        `backstop-expire-in-progress-${pl}`,
        `expire-noncurrent-in-progress-${pl}`,
        `backstop-expire-coordinator-work-${pl}`,
      ]);
    }
    const sids = bucketPolicy
      .map((s) => (s as { Sid?: string }).Sid)
      .filter((sid) => sid?.startsWith('OnlyWriters'));
    expect(sids).toHaveLength(16);
    expect(new Set(sids).size).toBe(16);
    expect(sids).toContain('OnlyWritersPutManifestsOforders');
    expect(sids).toContain('OnlyWritersPutManifestsOfordersDASHeu');
  });

  it('lets each pipeline write its own prefixes and ledger keys (the model is live)', () => {
    for (const [pipeline, pl] of [
      [orders, 'orders'],
      [payments, 'orders-eu'],
    ] as const) {
      const processor = stack.getLogicalId(pipeline.processor.node.defaultChild as never);
      const promote = stack.getLogicalId(pipeline.coordinator.functions.promote.node.defaultChild as never);
      expect(onObject(processor, 's3:PutObject', objectsOf(pl).stagedOutput)).toBe('allow');
      expect(onObject(promote, 's3:PutObject', objectsOf(pl).final)).toBe('allow');
      expect(onItem(processor, 'dynamodb:UpdateItem', itemsOf(pl).fence)).toBe('allow');
      expect(onItem(promote, 'dynamodb:UpdateItem', itemsOf(pl).checkpointHead)).toBe('allow');
    }
  });

  it.each([
    ['orders', 'orders-eu'],
    ['orders-eu', 'orders'],
  ])("gives no role of pipeline %s any action on pipeline %s's objects or items", (own, other) => {
    const pipeline = own === 'orders' ? orders : payments;
    const allowed: string[] = [];
    for (const role of rolesOf(stack, pipeline)) {
      for (const [name, key] of Object.entries(objectsOf(other))) {
        for (const action of OBJECT_ACTIONS) {
          if (onObject(role.logicalId, action, key) === 'allow')
            allowed.push(`${role.name} ${action} ${name}`);
        }
      }
      for (const [name, pk] of Object.entries(itemsOf(other))) {
        for (const action of ITEM_ACTIONS) {
          if (onItem(role.logicalId, action, pk) === 'allow') allowed.push(`${role.name} ${action} ${name}`);
        }
      }
    }
    expect(allowed).toEqual([]);
  });

  it("denies each pipeline's writers on the other's prefixes in the bucket policy too", () => {
    // Even a role granted s3:* on the bucket: the other pipeline's boundaries name only that pipeline's writers.
    const processor = stack.getLogicalId(orders.processor.node.defaultChild as never);
    const everything: PolicyStatement[] = [{ Effect: 'Allow', Action: 's3:*', Resource: `${bucketArn}/*` }];
    const request = (key: string): AccessRequest => ({
      principal: roleArnOf(json, processor),
      action: 's3:PutObject',
      resource: `${bucketArn}/${key}`,
      context: { 'aws:SecureTransport': 'true' },
    });
    expect(evaluate(json, everything, bucketPolicy, request(objectsOf('orders-eu').stagedOutput))).toBe(
      'explicit-deny',
    );
    expect(evaluate(json, everything, bucketPolicy, request(objectsOf('orders').stagedOutput))).toBe('allow');
  });

  it('keeps cdk-nag clean with both pipelines', () => {
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });

  it('refuses a second pipeline of the same id on the same table or bucket', () => {
    const shared = newStack();
    const first = pipelineIn(shared, {}, 'First');
    expect(() => pipelineIn(shared, { table: first.table, bucket: first.bucket }, 'Second')).toThrow(
      /^invalid setting pipelineId: "orders" already names a pipeline of this table/,
    );
  });

  it('refuses settings of a table or bucket the pipeline does not create', () => {
    const shared = newStack();
    const first = pipelineIn(shared, {}, 'First');
    expect(() =>
      pipelineIn(shared, { pipelineId: 'b', table: first.table, deletionProtection: false }, 'B'),
    ).toThrow(/^invalid setting deletionProtection: applies to a table the pipeline creates/);
    expect(() =>
      pipelineIn(
        shared,
        { pipelineId: 'c', bucket: first.bucket, noncurrentVersionExpiration: Duration.days(9) },
        'C',
      ),
    ).toThrow(/^invalid setting noncurrentVersionExpiration: /);
  });
});

describe('encryption with shared or brought keys', () => {
  it("grants a sharing pipeline the table's and bucket's key, only through DynamoDB and S3", () => {
    const stack = newStack();
    const first = pipelineIn(stack, { encryption: 'kms' }, 'First');
    const second = pipelineIn(
      stack,
      { pipelineId: 'second', table: first.table, bucket: first.bucket },
      'Second',
    );
    expect(second.encryptionKey).toBeUndefined();
    const json = Template.fromStack(stack).toJSON() as TemplateJson;
    const keyId = stack.getLogicalId(first.encryptionKey!.node.defaultChild as never);
    const processor = roleStatements(json, stack.getLogicalId(second.processor.node.defaultChild as never));
    const keyGrant = processor.find((s) => JSON.stringify(s.Resource).includes(keyId)) as PolicyStatement;
    const via = JSON.stringify(keyGrant.Condition?.StringEquals?.['kms:ViaService']);
    expect(via).toContain('"s3.eu-west-1."');
    expect(via).toContain('"dynamodb.eu-west-1."');
    expect(actionsOfStatement(keyGrant)).not.toContain('kms:ReEncrypt*');
  });

  it("warns when a given key is not this stack's (its policy cannot take the log and alarm statements)", () => {
    const stack = newStack();
    const key = kms.Key.fromKeyArn(
      stack,
      'Imported',
      'arn:aws:kms:eu-west-1:123456789012:key/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d',
    );
    pipelineIn(stack, { encryptionKey: key });
    Annotations.fromStack(stack).hasWarning(
      '/Api/Pipeline',
      Match.stringLikeRegexp('the policy of key Api/Imported is not this stack.s: allow CloudWatch Logs'),
    );
  });
});

describe('bringing your own table and bucket', () => {
  it('checks a table defined in the app against the ledger layout', () => {
    const stack = newStack();
    const wrong = new dynamodb.Table(stack, 'Wrong', {
      partitionKey: { name: 'id', type: dynamodb.AttributeType.STRING },
    });
    expect(() => pipelineIn(stack, { table: wrong }, 'OnWrong')).toThrow(
      /^invalid setting table: its partition key is id \(S\); its sort key is missing; its TTL is off; the ledger needs partition key pk \(S\), sort key sk \(S\), TTL on expiresAt/,
    );
    const right = new dynamodb.TableV2(stack, 'Right', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      timeToLiveAttribute: 'expiresAt',
    });
    const pipeline = pipelineIn(stack, { table: right }, 'OnRight');
    expect(pipeline.table).toBe(right);
    // The brought table (a global table resource) is the only one.
    const template = Template.fromStack(stack);
    template.resourceCountIs('AWS::DynamoDB::Table', 1);
    template.resourceCountIs('AWS::DynamoDB::GlobalTable', 1);
  });

  it('cannot change an imported bucket: warns, exposes the statements to add, and stays nag-clean', () => {
    const stack = newStack();
    const bucket = s3.Bucket.fromBucketName(stack, 'Existing', 'my-data-lake');
    const table = dynamodb.Table.fromTableName(stack, 'ExistingTable', 'my-ledger');
    const pipeline = pipelineIn(stack, { bucket, table });
    acknowledgeNagFindings(pipeline);
    const template = Template.fromStack(stack);
    template.resourceCountIs('AWS::S3::Bucket', 0);
    template.resourceCountIs('AWS::S3::BucketPolicy', 0);
    template.resourceCountIs('AWS::DynamoDB::Table', 0);
    expect(pipeline.bucketPolicyAdded).toBe(false);
    expect(pipeline.bucketPolicyStatements.map((s) => s.sid)).toEqual([
      ...['Manifests', 'FinalData', 'CoordinatorWork', 'Staged'].flatMap((boundary) => [
        `OnlyWritersPut${boundary}Oforders`,
        `OnlyWritersDelete${boundary}Oforders`,
      ]),
      'WriteOnceManifestsOforders',
      'WriteOnceFinalDataOforders',
    ]);
    expect(pipeline.bucketAdminPolicyStatement.sid).toBe('OnlyAdminsChangeTheBucket');
    Annotations.fromStack(stack).hasWarning(
      '/Api/Pipeline',
      Match.stringLikeRegexp('bucket Api/Existing is not this stack.s.*bucketPolicyStatements'),
    );
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
    // The roles are still scoped to the pipeline's prefixes of that bucket.
    const json = template.toJSON() as TemplateJson;
    const processor = roleStatements(json, stack.getLogicalId(pipeline.processor.node.defaultChild as never));
    const staging = processor.find((s) => (s as { Sid?: string }).Sid === 'StageObjects');
    expect(JSON.stringify(staging)).toContain(':s3:::my-data-lake/orders/_inprogress/output/*');
    expect(JSON.stringify(staging)).not.toContain('/final/');
  });
});

describe('grants and metrics', () => {
  it('grantReadCommitted reads manifests and final objects of this pipeline only', () => {
    const stack = newStack();
    const pipeline = pipelineIn(stack, { encryption: 'kms' });
    const reader = new iam.Role(stack, 'Reader', { assumedBy: new iam.AccountRootPrincipal() });
    pipeline.grantReadCommitted(reader);
    const json = Template.fromStack(stack).toJSON() as TemplateJson;
    const statements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties?.Roles).includes('Reader'))
      .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: PolicyStatement[] }).Statement);
    const bucketArn = String(
      resolveIntrinsics(
        { 'Fn::GetAtt': [stack.getLogicalId(pipeline.bucket.node.defaultChild as never), 'Arn'] },
        json,
      ),
    );
    const readerArn = String(
      resolveIntrinsics(
        { 'Fn::GetAtt': [stack.getLogicalId(reader.node.defaultChild as never), 'Arn'] },
        json,
      ),
    );
    const can = (action: string, resource: string, context: AccessRequest['context'] = {}) =>
      evaluate(json, statements, [], { principal: readerArn, action, resource, context });
    const own = objectsOf('orders');
    expect(can('s3:GetObject', `${bucketArn}/${own.final}`)).toBe('allow');
    expect(can('s3:GetObject', `${bucketArn}/${own.manifest}`)).toBe('allow');
    expect(can('s3:ListBucket', bucketArn, { 's3:prefix': manifestsPrefix('orders') })).toBe('allow');
    expect(can('s3:GetObject', `${bucketArn}/${own.stagedOutput}`)).toBe('implicit-deny');
    expect(can('s3:GetObject', `${bucketArn}/${own.work}`)).toBe('implicit-deny');
    expect(can('s3:PutObject', `${bucketArn}/${own.final}`)).toBe('implicit-deny');
    expect(can('s3:GetObject', `${bucketArn}/${objectsOf('orders-eu').final}`)).toBe('implicit-deny');
    expect(can('s3:ListBucket', bucketArn, { 's3:prefix': 'orders-eu/_manifests/' })).toBe('implicit-deny');
    const decrypt = statements.find((s) => JSON.stringify(s.Action) === '"kms:Decrypt"');
    expect(decrypt?.Condition?.StringEquals?.['kms:ViaService']).toBeDefined();
  });

  it('operatorRoles may run eos epoch and eos redrive: processor items, staging (bucket policy too), committed reads; nothing of the coordinator', () => {
    const stack = newStack();
    const operator = new iam.Role(stack, 'Operator', { assumedBy: new iam.AccountRootPrincipal() });
    const stranger = new iam.Role(stack, 'Stranger', { assumedBy: new iam.AccountRootPrincipal() });
    const pipeline = pipelineIn(stack, { encryption: 'kms', operatorRoles: [operator] });
    stranger.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['s3:PutObject'], resources: [pipeline.bucket.arnForObjects('*')] }),
    );
    expect(pipeline.operatorRoles).toEqual([operator]);
    const json = Template.fromStack(stack).toJSON() as TemplateJson;
    const arnOf = (role: iam.Role) =>
      String(
        resolveIntrinsics(
          { 'Fn::GetAtt': [stack.getLogicalId(role.node.defaultChild as never), 'Arn'] },
          json,
        ),
      );
    const bucketArn = String(
      resolveIntrinsics(
        { 'Fn::GetAtt': [stack.getLogicalId(pipeline.bucket.node.defaultChild as never), 'Arn'] },
        json,
      ),
    );
    const tableArn = String(
      resolveIntrinsics(
        { 'Fn::GetAtt': [stack.getLogicalId(pipeline.table.node.defaultChild as never), 'Arn'] },
        json,
      ),
    );
    const bucketPolicy = bucketPolicyStatements(
      json,
      stack.getLogicalId(pipeline.bucket.node.defaultChild as never),
    );
    const statementsOf = (name: string) =>
      Object.values(json.Resources)
        .filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties?.Roles).includes(name))
        .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: PolicyStatement[] }).Statement);
    const can = (
      who: iam.Role,
      name: string,
      action: string,
      resource: string,
      context: AccessRequest['context'] = {},
    ) =>
      evaluate(json, statementsOf(name), bucketPolicy, { principal: arnOf(who), action, resource, context });
    const own = objectsOf('orders');
    const items = itemsOf('orders');
    expect(can(operator, 'Operator', 's3:PutObject', `${bucketArn}/${own.stagedOutput}`)).toBe('allow');
    expect(can(operator, 'Operator', 's3:PutObject', `${bucketArn}/${own.stagedDeadLetter}`)).toBe('allow');
    expect(can(operator, 'Operator', 's3:GetObject', `${bucketArn}/${own.manifest}`)).toBe('allow');
    expect(can(operator, 'Operator', 's3:PutObject', `${bucketArn}/${own.final}`)).toBe('explicit-deny');
    expect(can(operator, 'Operator', 's3:PutObject', `${bucketArn}/${own.manifest}`)).toBe('explicit-deny');
    expect(can(operator, 'Operator', 's3:PutObject', `${bucketArn}/${own.work}`)).toBe('explicit-deny');
    const ledger = (action: string, pk: string) =>
      can(operator, 'Operator', action, tableArn, { 'dynamodb:LeadingKeys': [pk] });
    expect(ledger('dynamodb:UpdateItem', items.fence)).toBe('allow');
    expect(ledger('dynamodb:Query', items.fence)).toBe('allow');
    expect(ledger('dynamodb:PutItem', items.stagedEntry)).toBe('allow');
    expect(ledger('dynamodb:UpdateItem', keys.checkpointHead('orders').pk)).toBe('implicit-deny');
    // Anyone else is held off the staged prefix by the bucket policy, whatever its own policy says.
    expect(can(stranger, 'Stranger', 's3:PutObject', `${bucketArn}/${own.stagedOutput}`)).toBe(
      'explicit-deny',
    );
  });

  it('metric methods name the metrics the handlers emit, with their dimensions', () => {
    const stack = newStack();
    const pipeline = pipelineIn(stack, { pipelineId: 'orders-eu', topic: 'orders' });
    new cloudwatch.Alarm(stack, 'Stale', {
      metric: pipeline.metricLastCommitAge(),
      threshold: 600,
      evaluationPeriods: 1,
    });
    new cloudwatch.Alarm(stack, 'Poison', {
      metric: pipeline.metricDeadLettered({ period: Duration.minutes(1) }),
      threshold: 1,
      evaluationPeriods: 1,
    });
    const template = Template.fromStack(stack);
    const dimensions = [
      { Name: 'pipeline', Value: 'orders-eu' },
      { Name: 'service', Value: 'exactly-once-pipeline' },
    ];
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'LastCommitAge',
      Namespace: 'ExactlyOncePipeline',
      Statistic: 'Maximum',
      Period: 300,
      Dimensions: dimensions,
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'RecordsDeadLettered',
      Statistic: 'Sum',
      Period: 60,
      Dimensions: dimensions,
    });
    expect(pipeline.metricRecordsStaged().metricName).toBe('RecordsStaged');
    expect(pipeline.metricCheckpointsCommitted().metricName).toBe('CheckpointsCommitted');
    expect(pipeline.metricCheckpointsAborted().metricName).toBe('CheckpointsAborted');
    expect(pipeline.metricOldestUncommittedAge().metricName).toBe('OldestUncommittedStagedAge');
    expect(pipeline.metricCheckpointDuration().statistic).toBe('p90');
  });
});

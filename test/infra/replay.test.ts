/**
 * The `replay` prop (replay into a new generation) on the synthesized template: a second processor built
 * like the processor plus `EOS_REPLAY_GENERATION`, a second mapping under `<group>-replay-g<N>`, and who may touch
 * the replay plans (`<pl>#REPLAY`), judged by the IAM model of `support/iam.ts` (identity and bucket policy
 * together): the replay processor reads them, begin reads, commit updates, operators write; the live processor,
 * prepare and promote get nothing. Without the prop there is no replay function, mapping or alarm; the plan grants
 * of begin, commit and operators stay (every begin lists the plans, and `eos replay` writes a plan before its
 * mapping is deployed).
 */
import { Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import {
  ExactlyOncePipeline,
  type ExactlyOncePipelineProps,
  processorLeadingKeys,
  replayLeadingKeys,
} from '../../infra/exactly-once-pipeline.ts';
import { acknowledgeNagFindings, unacknowledgedNagFindings } from '../../infra/nag.ts';
import { COORDINATOR_STEPS } from '../../shared/coordinator/definition.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { finalPrefix, manifestsPrefix, stagedStreamPrefix } from '../../shared/sink/layout.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import { bucketPolicyStatements, evaluate, type PolicyStatement, roleStatements } from '../support/iam.ts';
import { BASE_PROPS, CLUSTER_ARN, resourcesOf, testApp } from '../support/infra.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

const PL = 'orders';
const REPLAY_PK = `${PL}#REPLAY`;
const PLAN_ACTIONS = [
  'dynamodb:GetItem',
  'dynamodb:Query',
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:DeleteItem',
] as const;

function newStack(): Stack {
  return new Stack(testApp(), 'Infra', { env: { account: '123456789012', region: 'eu-west-1' } });
}

function pipelineIn(stack: Stack, props: Partial<ExactlyOncePipelineProps> = {}): ExactlyOncePipeline {
  return new ExactlyOncePipeline(stack, 'Pipeline', { ...BASE_PROPS, ...props });
}

interface LambdaProps {
  Environment?: { Variables?: Record<string, unknown> };
  Handler?: string;
  Runtime?: string;
  MemorySize?: number;
  Timeout?: number;
  Architectures?: string[];
}

/** A synthesized pipeline with the IAM model wired to its template. */
function synthesized(props: Partial<ExactlyOncePipelineProps> = {}) {
  const stack = newStack();
  const operator = new iam.Role(stack, 'Operator', { assumedBy: new iam.AccountRootPrincipal() });
  const pipeline = pipelineIn(stack, { operatorRoles: [operator], ...props });
  acknowledgeNagFindings(pipeline);
  const template = Template.fromStack(stack);
  const json = template.toJSON() as TemplateJson;
  const idOf = (construct: { node: { defaultChild?: unknown } }) =>
    stack.getLogicalId(construct.node.defaultChild as never);
  const arn = (logicalId: string) => String(resolveIntrinsics({ 'Fn::GetAtt': [logicalId, 'Arn'] }, json));
  const bucketId = idOf(pipeline.bucket);
  const bucketArn = arn(bucketId);
  const tableArn = arn(idOf(pipeline.table));
  const bucketPolicy = bucketPolicyStatements(json, bucketId);
  /** The statements of a role, by the logical id of the role itself. */
  const statementsOfRole = (roleId: string): PolicyStatement[] =>
    Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy')
      .filter((r) => JSON.stringify(r.Properties!.Roles).includes(`"${roleId}"`))
      .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: PolicyStatement[] }).Statement);
  const roleIdOf = (fn: { role?: iam.IRole }) => idOf(fn.role as iam.Role);
  const decide = (
    roleId: string,
    action: string,
    resource: string,
    context: Record<string, string | string[]>,
  ) =>
    evaluate(json, statementsOfRole(roleId), resource.startsWith(bucketArn) ? bucketPolicy : [], {
      principal: arn(roleId),
      action,
      resource,
      context,
    });
  const onItem = (roleId: string, action: string, pk: string) =>
    decide(roleId, action, tableArn, { 'dynamodb:LeadingKeys': [pk] });
  const onObject = (roleId: string, action: string, key: string) =>
    decide(roleId, action, `${bucketArn}/${key}`, { 'aws:SecureTransport': 'true' });
  const lambdaProps = (fn: { node: { defaultChild?: unknown } }) =>
    resourcesOf(template, 'AWS::Lambda::Function')[idOf(fn)]!.Properties as LambdaProps;
  return {
    stack,
    pipeline,
    template,
    json,
    operator: idOf(operator),
    decide,
    roleIdOf,
    onItem,
    onObject,
    lambdaProps,
  };
}

/** The representative items and objects a processor touches (its fence, staged entry, claim, state; a staged file). */
const processorItems = [
  keys.fence(PL, 'orders', 3).pk,
  keys.stagedPk(PL, 'orders', 3),
  keys.claim(PL, 'order-42').pk,
  keys.state(PL, 'customer-1').pk,
];
const stagedObject = `${stagedStreamPrefix(PL, 'output')}orders~g2+3+100-199.attempt-1.ndjson.gz`;

describe('replay: generation 2', () => {
  const s = synthesized({ replay: { generation: 2 } });
  const replay = s.pipeline.replay!;

  it('builds a second processor like the processor, plus EOS_REPLAY_GENERATION=2', () => {
    expect(replay).toBeDefined();
    expect(replay.generation).toBe(2);
    expect(replay.processor).not.toBe(s.pipeline.processor);
    const live = s.lambdaProps(s.pipeline.processor);
    const second = s.lambdaProps(replay.processor);
    const liveEnv = live.Environment!.Variables!;
    const replayEnv = second.Environment!.Variables!;
    expect(replayEnv.EOS_REPLAY_GENERATION).toBe('2');
    expect(liveEnv.EOS_REPLAY_GENERATION).toBeUndefined();
    const { EOS_REPLAY_GENERATION: _generation, ...replayRest } = replayEnv;
    expect(replayRest).toEqual(liveEnv);
    // The processor's own settings are really there (the comparison is not of two empty maps).
    expect(Object.keys(liveEnv)).toEqual(
      expect.arrayContaining(['EOS_PIPELINE_ID', 'EOS_LEDGER_TABLE', 'EOS_BUCKET', 'EOS_TOPICS']),
    );
    expect(liveEnv.EOS_EVENT_SOURCE_ARN).toBe(BASE_PROPS.mskClusterArn);
    for (const prop of ['Handler', 'Runtime', 'MemorySize', 'Timeout', 'Architectures'] as const) {
      expect(second[prop], prop).toEqual(live[prop]);
    }
    // The same bundle: the asset (the entry) the live processor's code is built from.
    const code = (fn: { node: { defaultChild?: unknown } }) =>
      JSON.stringify(
        resourcesOf(s.template, 'AWS::Lambda::Function')[s.stack.getLogicalId(fn.node.defaultChild as never)]!
          .Properties.Code,
      );
    expect(code(replay.processor)).toBe(code(s.pipeline.processor));
    s.template.resourceCountIs('AWS::Lambda::Function', 2 + COORDINATOR_STEPS.length + 1);
  });

  it('adds a second mapping on the same cluster and topic, consumer group <group>-replay-g2, from TRIM_HORIZON', () => {
    const mappings = Object.values(resourcesOf(s.template, 'AWS::Lambda::EventSourceMapping')).map(
      (m) => m.Properties as Record<string, unknown>,
    );
    expect(mappings).toHaveLength(2);
    const group = (m: Record<string, unknown>) =>
      (m.AmazonManagedKafkaEventSourceConfig as { ConsumerGroupId: string }).ConsumerGroupId;
    const live = mappings.find((m) => group(m) === 'eos-orders')!;
    const second = mappings.find((m) => group(m) === 'eos-orders-replay-g2')!;
    expect(live).toBeDefined();
    expect(second).toBeDefined();
    expect(replay.consumerGroupId).toBe('eos-orders-replay-g2');
    expect(second.EventSourceArn).toBe(live.EventSourceArn);
    expect(second.Topics).toEqual(live.Topics);
    expect(second.BatchSize).toBe(live.BatchSize);
    expect(second.StartingPosition).toBe('TRIM_HORIZON');
    expect(second.StartingPositionTimestamp).toBeUndefined();
    const target = (m: Record<string, unknown>) => JSON.stringify(m.FunctionName);
    expect(target(second)).toContain(s.stack.getLogicalId(replay.processor.node.defaultChild as never));
    expect(target(live)).toContain(s.stack.getLogicalId(s.pipeline.processor.node.defaultChild as never));
    expect(replay.eventSource).toBeDefined();
  });

  it('lets the replay processor read its consumer group on the cluster (IAM auth), not only the live one', () => {
    const statements = JSON.stringify(
      roleStatements(s.json, s.stack.getLogicalId(replay.processor.node.defaultChild as never)),
    );
    expect(statements).toContain('eos-orders-replay-g2');
    expect(statements).toContain('kafka-cluster:ReadData');
  });

  it('the replay processor may GetItem the replay plans, never write them, and stages like the processor', () => {
    const role = s.roleIdOf(replay.processor);
    expect(s.onItem(role, 'dynamodb:GetItem', REPLAY_PK)).toBe('allow');
    for (const action of [
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
      'dynamodb:DeleteItem',
      'dynamodb:Query',
    ]) {
      expect(s.onItem(role, action, REPLAY_PK), action).toBe('implicit-deny');
    }
    const live = s.roleIdOf(s.pipeline.processor);
    for (const pk of processorItems) {
      for (const action of ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem']) {
        expect(s.onItem(role, action, pk), `${action} ${pk}`).toBe(s.onItem(live, action, pk));
        expect(s.onItem(role, action, pk), `${action} ${pk}`).toBe('allow');
      }
    }
    // Staging passes the bucket policy too (the replay processor is one of the staged prefix's writers)...
    expect(s.onObject(role, 's3:PutObject', stagedObject)).toBe('allow');
    // ... and nothing of the coordinator's: no checkpoint head, no final data, no manifest.
    expect(s.onItem(role, 'dynamodb:UpdateItem', keys.checkpointHead(PL).pk)).toBe('implicit-deny');
    expect(s.onObject(role, 's3:PutObject', `${finalPrefix(PL)}output/orders+3+100-199.ndjson.gz`)).not.toBe(
      'allow',
    );
    expect(s.onObject(role, 's3:PutObject', `${manifestsPrefix(PL)}00000000000000000007.json`)).not.toBe(
      'allow',
    );
  });

  it('the live processor gets nothing on the replay plans', () => {
    const live = s.roleIdOf(s.pipeline.processor);
    for (const action of PLAN_ACTIONS)
      expect(s.onItem(live, action, REPLAY_PK), action).toBe('implicit-deny');
    // The live processor's own item kinds do not match <pl>#REPLAY either.
    expect(replayLeadingKeys(PL)).toEqual([REPLAY_PK]);
    expect(processorLeadingKeys(PL).some((pattern) => pattern === REPLAY_PK)).toBe(false);
  });

  it('begin reads (Query, GetItem) the replay plans, commit reads and updates them, no other step touches them', () => {
    const step = (name: (typeof COORDINATOR_STEPS)[number]) =>
      s.roleIdOf(s.pipeline.coordinator.functions[name]);
    expect(s.onItem(step('begin'), 'dynamodb:Query', REPLAY_PK)).toBe('allow');
    expect(s.onItem(step('begin'), 'dynamodb:GetItem', REPLAY_PK)).toBe('allow');
    expect(s.onItem(step('begin'), 'dynamodb:UpdateItem', REPLAY_PK)).toBe('implicit-deny');
    expect(s.onItem(step('begin'), 'dynamodb:PutItem', REPLAY_PK)).toBe('implicit-deny');
    expect(s.onItem(step('commit'), 'dynamodb:GetItem', REPLAY_PK)).toBe('allow');
    expect(s.onItem(step('commit'), 'dynamodb:UpdateItem', REPLAY_PK)).toBe('allow');
    expect(s.onItem(step('commit'), 'dynamodb:PutItem', REPLAY_PK)).toBe('implicit-deny');
    expect(s.onItem(step('commit'), 'dynamodb:DeleteItem', REPLAY_PK)).toBe('implicit-deny');
    for (const other of COORDINATOR_STEPS.filter((name) => name !== 'begin' && name !== 'commit')) {
      for (const action of PLAN_ACTIONS) {
        expect(s.onItem(step(other), action, REPLAY_PK), `${other} ${action}`).toBe('implicit-deny');
      }
    }
    // The model is live: commit still moves the checkpoint head.
    expect(s.onItem(step('commit'), 'dynamodb:UpdateItem', keys.checkpointHead(PL).pk)).toBe('allow');
  });

  it('operatorRoles may put, update, get and query the replay plans (and still not the coordinator items)', () => {
    for (const action of ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:GetItem', 'dynamodb:Query']) {
      expect(s.onItem(s.operator, action, REPLAY_PK), action).toBe('allow');
    }
    expect(s.onItem(s.operator, 'dynamodb:DeleteItem', REPLAY_PK)).toBe('implicit-deny');
    expect(s.onItem(s.operator, 'dynamodb:UpdateItem', keys.checkpointHead(PL).pk)).toBe('implicit-deny');
    // Another pipeline's plans are not this pipeline's.
    expect(s.onItem(s.operator, 'dynamodb:PutItem', 'orders-eu#REPLAY')).toBe('implicit-deny');
  });

  it('operatorRoles may ask the MSK cluster for the topic offsets at a time (eos replay --from-timestamp), and read no record', () => {
    const topicArn = `${CLUSTER_ARN.replace(':cluster/', ':topic/')}/orders`;
    expect(s.decide(s.operator, 'kafka:GetBootstrapBrokers', CLUSTER_ARN, {})).toBe('allow');
    expect(s.decide(s.operator, 'kafka-cluster:Connect', CLUSTER_ARN, {})).toBe('allow');
    expect(s.decide(s.operator, 'kafka-cluster:DescribeTopic', topicArn, {})).toBe('allow');
    expect(s.decide(s.operator, 'kafka-cluster:ReadData', topicArn, {})).toBe('implicit-deny');
    expect(s.decide(s.operator, 'kafka-cluster:DescribeTopic', `${topicArn}-other`, {})).toBe(
      'implicit-deny',
    );
    expect(
      s.decide(
        s.operator,
        'kafka-cluster:AlterGroup',
        `${CLUSTER_ARN.replace(':cluster/', ':group/')}/g`,
        {},
      ),
    ).toBe('implicit-deny');
  });

  it('gives the replay processor its own log group and role, and an Errors alarm on the alarm topic', () => {
    expect(replay.processor.logGroupOwn).not.toBe(s.pipeline.processor.logGroupOwn);
    expect(replay.processor.role).not.toBe(s.pipeline.processor.role);
    const logWrites = JSON.stringify(
      roleStatements(s.json, s.stack.getLogicalId(replay.processor.node.defaultChild as never)).filter((st) =>
        [st.Action].flat().includes('logs:PutLogEvents'),
      ),
    );
    expect(logWrites).toContain(
      s.stack.getLogicalId(replay.processor.logGroupOwn.node.defaultChild as never),
    );
    for (const role of Object.values(resourcesOf(s.template, 'AWS::IAM::Role'))) {
      expect(role.Properties.ManagedPolicyArns).toBeUndefined();
    }
    const alarm = s.pipeline.observability.replayProcessorErrors!;
    expect(alarm).toBeDefined();
    expect(s.pipeline.observability.alarmNames).toContain('eos-orders-ReplayG2ProcessorErrors');
    const alarmProps = resourcesOf(s.template, 'AWS::CloudWatch::Alarm')[
      s.stack.getLogicalId(alarm.node.defaultChild as never)
    ]!.Properties;
    expect(alarmProps.MetricName).toBe('Errors');
    expect(JSON.stringify(alarmProps.Dimensions)).toContain(
      s.stack.getLogicalId(replay.processor.node.defaultChild as never),
    );
    expect(JSON.stringify(alarmProps.AlarmActions)).toContain(
      s.stack.getLogicalId(s.pipeline.alarmTopic.node.defaultChild as never),
    );
  });

  it("keeps cdk-nag clean: the replay processor's findings are acknowledged like the processor's", () => {
    // (The test's own operator role is no part of the pipeline: its findings are the app's to acknowledge.)
    const pipelineFindings = (stack: Stack) =>
      unacknowledgedNagFindings(stack).filter((f) => !f.includes(' at Infra/Operator/'));
    expect(pipelineFindings(s.stack)).toEqual([]);
    // Live: the replay processor's role has findings that only the acknowledgements clear.
    const bare = newStack();
    pipelineIn(bare, { replay: { generation: 2 } });
    expect(unacknowledgedNagFindings(bare).some((f) => f.includes('/ReplayG2ProcessorRole/'))).toBe(true);
  });
});

describe('replay: starting position, and no mapping without one', () => {
  it('AT_TIMESTAMP starts the replay group at the timestamp, and leaves the live mapping as it was', () => {
    const s = synthesized({
      replay: { generation: 7, startingPosition: 'AT_TIMESTAMP', startingPositionTimestamp: 1_767_225_600 },
    });
    const mappings = Object.values(resourcesOf(s.template, 'AWS::Lambda::EventSourceMapping')).map(
      (m) => m.Properties as Record<string, unknown>,
    );
    const second = mappings.find((m) => JSON.stringify(m).includes('eos-orders-replay-g7'))!;
    const live = mappings.find((m) => m !== second)!;
    expect(second.StartingPosition).toBe('AT_TIMESTAMP');
    expect(second.StartingPositionTimestamp).toBe(1_767_225_600);
    expect(live.StartingPosition).toBe('TRIM_HORIZON');
    expect(live.StartingPositionTimestamp).toBeUndefined();
    expect(s.lambdaProps(s.pipeline.replay!.processor).Environment!.Variables!.EOS_REPLAY_GENERATION).toBe(
      '7',
    );
  });

  it('with eventSourceMapping: false, builds the replay processor without a mapping', () => {
    const s = synthesized({ replay: { generation: 2 }, eventSourceMapping: false });
    s.template.resourceCountIs('AWS::Lambda::EventSourceMapping', 0);
    expect(s.pipeline.replay?.processor).toBeDefined();
    expect(s.pipeline.replay?.eventSource).toBeUndefined();
    expect(unacknowledgedNagFindings(s.stack).filter((f) => !f.includes(' at Infra/Operator/'))).toEqual([]);
  });
});

describe('replay: invalid props', () => {
  const refused =
    (replay: unknown, props: Partial<ExactlyOncePipelineProps> = {}) =>
    () =>
      pipelineIn(newStack(), { ...props, replay: replay as ExactlyOncePipelineProps['replay'] });

  it.each([
    [0, 'invalid setting replay.generation: an integer from 1 to 999999999 (got 0)'],
    [1.5, 'invalid setting replay.generation: an integer from 1 to 999999999 (got 1.5)'],
    [1_000_000_000, 'invalid setting replay.generation: an integer from 1 to 999999999 (got 1000000000)'],
    ['2', 'invalid setting replay.generation: an integer from 1 to 999999999 (got "2")'],
  ])('refuses generation %j', (generation, message) => {
    expect(refused({ generation })).toThrow(InvalidSettingError);
    expect(refused({ generation })).toThrow(message);
  });

  it('accepts the bounds 1 and 999999999', () => {
    expect(pipelineIn(newStack(), { replay: { generation: 1 } }).replay?.consumerGroupId).toBe(
      'eos-orders-replay-g1',
    );
    expect(pipelineIn(newStack(), { replay: { generation: 999_999_999 } }).replay?.generation).toBe(
      999_999_999,
    );
  });

  it('refuses AT_TIMESTAMP without a timestamp, and a timestamp without AT_TIMESTAMP', () => {
    expect(refused({ generation: 2, startingPosition: 'AT_TIMESTAMP' })).toThrow(
      'invalid setting replay.startingPositionTimestamp: required with replay.startingPosition AT_TIMESTAMP',
    );
    expect(refused({ generation: 2, startingPositionTimestamp: 1_767_225_600 })).toThrow(
      'invalid setting replay.startingPositionTimestamp: only used with replay.startingPosition AT_TIMESTAMP (not TRIM_HORIZON)',
    );
    expect(
      refused({ generation: 2, startingPosition: 'TRIM_HORIZON', startingPositionTimestamp: 1_767_225_600 }),
    ).toThrow('only used with replay.startingPosition AT_TIMESTAMP');
  });

  it('refuses LATEST, a timestamp in milliseconds, and unknown fields', () => {
    expect(refused({ generation: 2, startingPosition: 'LATEST' })).toThrow(
      'invalid setting replay.startingPosition: TRIM_HORIZON or AT_TIMESTAMP (got "LATEST")',
    );
    expect(
      refused({
        generation: 2,
        startingPosition: 'AT_TIMESTAMP',
        startingPositionTimestamp: 1_767_225_600_000,
      }),
    ).toThrow(
      'invalid setting replay.startingPositionTimestamp: whole Unix seconds (got 1767225600000: milliseconds?)',
    );
    expect(refused({ generation: 2, consumerGroupId: 'mine' })).toThrow(
      'invalid setting replay.consumerGroupId: unknown field',
    );
    expect(refused(2)).toThrow('invalid setting replay: expected { generation');
  });

  it('needs the exactly-once delivery guarantee', () => {
    for (const deliveryGuarantee of ['at-least-once', 'none'] as const) {
      expect(refused({ generation: 2 }, { deliveryGuarantee })).toThrow(
        `invalid setting replay: needs deliveryGuarantee 'exactly-once' (got '${deliveryGuarantee}')`,
      );
    }
  });

  it('refuses a consumer group the suffix would make longer than Lambda allows', () => {
    // 190 + '-replay-g2' is 200 characters, Lambda's limit: accepted; one more is refused.
    expect(
      pipelineIn(newStack(), { consumerGroupId: 'g'.repeat(190), replay: { generation: 2 } }).replay,
    ).toBeDefined();
    expect(refused({ generation: 2 }, { consumerGroupId: 'g'.repeat(191) })).toThrow(
      'is longer than 200 characters: shorten consumerGroupId',
    );
  });

  it('fails before any resource is built', () => {
    const stack = newStack();
    expect(() => pipelineIn(stack, { replay: { generation: 0 } })).toThrow(InvalidSettingError);
    expect(stack.node.findAll().filter((c) => c.node.path.startsWith('Infra/Pipeline/'))).toEqual([]);
  });
});

describe('replay: absent prop', () => {
  it('adds no replay processor, mapping, setting or alarm', () => {
    const s = synthesized();
    expect(s.pipeline.replay).toBeUndefined();
    s.template.resourceCountIs('AWS::Lambda::Function', 1 + COORDINATOR_STEPS.length + 1);
    s.template.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
    const text = JSON.stringify(s.json);
    expect(text).not.toContain('EOS_REPLAY_GENERATION');
    expect(text).not.toContain('-replay-g');
    expect(text).not.toContain('ReplayG');
    expect(text).not.toContain('ReplayPlanReads');
    expect(s.pipeline.observability.replayProcessorErrors).toBeUndefined();
    expect(s.pipeline.observability.alarmNames.some((name) => name.includes('Replay'))).toBe(false);
  });

  it('keeps the plan grants that do not depend on a deployed replay: every begin lists the plans, operators write them first', () => {
    const s = synthesized();
    const step = (name: (typeof COORDINATOR_STEPS)[number]) =>
      s.roleIdOf(s.pipeline.coordinator.functions[name]);
    expect(s.onItem(step('begin'), 'dynamodb:Query', REPLAY_PK)).toBe('allow');
    expect(s.onItem(step('commit'), 'dynamodb:UpdateItem', REPLAY_PK)).toBe('allow');
    expect(s.onItem(s.operator, 'dynamodb:PutItem', REPLAY_PK)).toBe('allow');
    for (const action of PLAN_ACTIONS) {
      expect(s.onItem(s.roleIdOf(s.pipeline.processor), action, REPLAY_PK), action).toBe('implicit-deny');
      for (const other of ['prepare', 'decide', 'promote', 'cleanup', 'abort'] as const) {
        expect(s.onItem(step(other), action, REPLAY_PK), `${other} ${action}`).toBe('implicit-deny');
      }
    }
  });

  it('synthesizes the same template as a replay prop of undefined', () => {
    const without = JSON.stringify(synthesized().json);
    const undefinedProp = JSON.stringify(synthesized({ replay: undefined }).json);
    expect(undefinedProp).toBe(without);
    expect(JSON.stringify(synthesized({ replay: { generation: 2 } }).json)).not.toBe(without);
  });
});

/**
 * Least privilege, checked against behaviour: every AWS call each coordinator step makes in a local run (commit,
 * abort with an orphan sweep, recovery) is allowed by the IAM policy the synthesized stack gives that step's
 * function — action, table or object key, leading key and list prefix.
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../local/coordinator-runner.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { ManualClock } from '../shared/clock.ts';
import { parseSettings } from '../shared/config/settings.ts';
import { COORDINATOR_STEPS, type CoordinatorStep } from '../shared/coordinator/definition.ts';
import { createProcessor } from '../shared/processor/processor.ts';
import { stagedObjectKey } from '../shared/sink/layout.ts';
import { resolveIntrinsics, type SynthesizedCoordinator, synthesizeCoordinator } from './support/asl.ts';
import { freshResources, type TestResources } from './support/aws.ts';
import { mskEvent, orderRecords } from './support/msk.ts';

interface Call {
  readonly action: string;
  /** `table` for DynamoDB, the object key for object actions, the list prefix for s3:ListBucket. */
  readonly target: string;
  /** DynamoDB partition keys touched. */
  readonly leadingKeys: readonly string[];
}

type Statement = {
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
};

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('iam');
  deployed = synthesizeCoordinator();
});

function dynamoActions(command: string, input: Record<string, unknown>): Array<[string, string]> {
  const key = (item: { Key?: { pk?: unknown }; Item?: { pk?: unknown } }) =>
    String(item.Key?.pk ?? item.Item?.pk);
  switch (command) {
    case 'TransactWriteItemsCommand':
      return (input.TransactItems as Array<Record<string, Record<string, unknown>>>).map((item) => {
        const [kind, body] = Object.entries(item)[0]!;
        const action = {
          Put: 'PutItem',
          Update: 'UpdateItem',
          Delete: 'DeleteItem',
          ConditionCheck: 'ConditionCheckItem',
        }[kind]!;
        return [`dynamodb:${action}`, key(body as never)];
      });
    case 'QueryCommand':
      return [
        ['dynamodb:Query', String((input.ExpressionAttributeValues as Record<string, unknown>)[':pk'])],
      ];
    default:
      return [[`dynamodb:${command.replace(/Command$/, '')}`, key(input as never)]];
  }
}

function s3Calls(command: string, input: Record<string, unknown>): Call[] {
  switch (command) {
    case 'HeadObjectCommand':
    case 'GetObjectCommand':
      return [{ action: 's3:GetObject', target: String(input.Key), leadingKeys: [] }];
    case 'PutObjectCommand':
      return [{ action: 's3:PutObject', target: String(input.Key), leadingKeys: [] }];
    case 'DeleteObjectsCommand':
      return (input.Delete as { Objects: Array<{ Key: string }> }).Objects.map((o) => ({
        action: 's3:DeleteObject',
        target: o.Key,
        leadingKeys: [],
      }));
    case 'ListObjectsV2Command':
      return [{ action: 's3:ListBucket', target: String(input.Prefix), leadingKeys: [] }];
    default:
      return [
        { action: `s3:${command.replace(/Command$/, '')}`, target: String(input.Key), leadingKeys: [] },
      ];
  }
}

function statementsOf(step: CoordinatorStep): Statement[] {
  const template = deployed.template;
  const fn =
    template.Resources[
      deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never)
    ]!;
  const role = (fn.Properties!.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy')
    .filter((r) => JSON.stringify(r.Properties!.Roles).includes(`"${role}"`))
    .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: Statement[] }).Statement);
}

const glob = (pattern: string, value: string): boolean =>
  pattern.endsWith('*') ? value.startsWith(pattern.slice(0, -1)) : pattern === value;

function allowed(step: CoordinatorStep, call: Call): boolean {
  const bucketArn = String(
    resolveIntrinsics({ 'Fn::GetAtt': [bucketLogicalId(), 'Arn'] }, deployed.template),
  );
  return statementsOf(step).some((statement) => {
    if (![statement.Action].flat().includes(call.action)) return false;
    const resources = [statement.Resource].flat().map((r) => String(resolveIntrinsics(r, deployed.template)));
    if (call.action.startsWith('dynamodb:')) {
      const leading = statement.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'] as
        | string[]
        | undefined;
      return (
        resources.some((r) => r.includes('Ledger')) &&
        call.leadingKeys.every((k) => leading?.some((p) => glob(p, k)))
      );
    }
    if (call.action === 's3:ListBucket') {
      const prefixes = [statement.Condition?.StringLike?.['s3:prefix'] ?? []].flat() as string[];
      return resources.includes(bucketArn) && prefixes.some((p) => glob(p, call.target));
    }
    return resources.some(
      (r) => r.startsWith(`${bucketArn}/`) && glob(r.slice(bucketArn.length + 1), call.target),
    );
  });
}

function bucketLogicalId(): string {
  return Object.entries(deployed.template.Resources).find(([, r]) => r.Type === 'AWS::S3::Bucket')![0];
}

describe('coordinator IAM', () => {
  it('grants each step every action it performs, on exactly the keys and prefixes it touches', async () => {
    // The synthesized stack scopes to pipeline "orders": this file's table and bucket are its own.
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: 'orders',
      orphanGraceSeconds: 60,
    });
    const clients = createAwsClients();
    const calls: Array<{ step: CoordinatorStep; call: Call }> = [];
    let current: CoordinatorStep | undefined;
    const record = (found: Call[]): void => {
      if (current) for (const call of found) calls.push({ step: current, call });
    };
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Record<string, unknown>;
        const found = dynamoActions(String(context.commandName), input);
        record(found.map(([action, pk]) => ({ action, target: 'table', leadingKeys: [pk] })));
        return next(args);
      },
      { step: 'initialize', name: 'recordCalls' },
    );
    clients.s3.middlewareStack.add(
      (next, context) => async (args) => {
        record(s3Calls(String(context.commandName), args.input as Record<string, unknown>));
        return next(args);
      },
      { step: 'initialize', name: 'recordCalls' },
    );
    const clock = new ManualClock(Date.now() + 120_000);
    let failPrepare = true;
    const local = createLocalCoordinator({
      settings,
      clients,
      clock,
      definition: deployed.definition,
      functionSteps: deployed.functionSteps,
      hooks: {
        beforeStep: (step) => {
          current = step;
          if (step === 'prepare' && failPrepare) throw new Error('prepare fails this time');
        },
      },
    });
    await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([...orderRecords(0, 0, 4), ...orderRecords(1, 0, 4)]),
    );
    const orphan = stagedObjectKey(
      'orders',
      { stream: 'output', topic: 'orders', partition: 0, firstOffset: 0, lastOffset: 3 },
      'dead',
      true,
    );
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: orphan, Body: 'x' }));

    const aborted = await local.runCheckpoint();
    expect(aborted.status).toBe('aborted');
    failPrepare = false;
    expect((await local.runCheckpoint()).status).toBe('committed');
    // Recovery: a checkpoint left BEGUN by a crashed execution, aborted by the next one's begin.
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 4, 2)));
    current = 'begin';
    await local.coordinator.begin({ execution: 'crashed' });
    clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
    expect((await local.runCheckpoint()).status).toBe('committed');

    const steps = new Set(calls.map((c) => c.step));
    expect([...steps].sort()).toEqual([...COORDINATOR_STEPS].sort());
    const denied = calls.filter(({ step, call }) => !allowed(step, call));
    expect(denied).toEqual([]);
    // And the check can fail: a step is not granted what another step does.
    expect(allowed('decide', { action: 's3:PutObject', target: 'orders/final/x', leadingKeys: [] })).toBe(
      false,
    );
    expect(allowed('promote', { action: 's3:PutObject', target: 'other/final/x', leadingKeys: [] })).toBe(
      false,
    );
    expect(
      allowed('begin', { action: 'dynamodb:GetItem', target: 'table', leadingKeys: ['other#CHECKPOINT'] }),
    ).toBe(false);
  });
});

/**
 * Least privilege checked against behaviour: record every AWS call a component makes on the local parts (as IAM
 * sees it: action, table leading keys, object key or list prefix) and check it against the statements the
 * synthesized template grants that component's role.
 */
import type { AwsClients } from '../../shared/aws/clients.ts';
import { resolveIntrinsics } from './asl.ts';

export interface Call {
  readonly action: string;
  /** `table` for DynamoDB, the object key for object actions, the list prefix for s3:ListBucket. */
  readonly target: string;
  /** DynamoDB partition keys touched. */
  readonly leadingKeys: readonly string[];
}

export type Statement = {
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
};

type Template = Parameters<typeof resolveIntrinsics>[1];

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

/** Calls `record` with every call the clients make from now on, as IAM would authorise them. */
export function recordCalls(clients: AwsClients, record: (calls: Call[]) => void): void {
  clients.dynamodb.middlewareStack.add(
    (next, context) => async (args) => {
      const found = dynamoActions(String(context.commandName), args.input as Record<string, unknown>);
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
}

/** Every statement of the policies attached to the role of the function with this logical id. */
export function roleStatements(template: Template, functionLogicalId: string): Statement[] {
  const fn = template.Resources[functionLogicalId]!;
  const role = (fn.Properties!.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy')
    .filter((r) => JSON.stringify(r.Properties!.Roles).includes(`"${role}"`))
    .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: Statement[] }).Statement);
}

const glob = (pattern: string, value: string): boolean =>
  pattern.endsWith('*') ? value.startsWith(pattern.slice(0, -1)) : pattern === value;

/** The sink bucket's logical id: the versioned bucket, not the access-log one. */
export function sinkBucketLogicalId(template: Template): string {
  const buckets = Object.entries(template.Resources).filter(([, r]) => r.Type === 'AWS::S3::Bucket');
  const sink = buckets.find(([, r]) =>
    JSON.stringify(r.Properties ?? {}).includes('VersioningConfiguration'),
  );
  return (sink ?? buckets[0]!)[0];
}

/** Whether `statements` allow `call`: action, table (any resource naming the ledger), leading keys, prefixes. */
export function isAllowed(template: Template, statements: readonly Statement[], call: Call): boolean {
  const bucketArn = String(
    resolveIntrinsics({ 'Fn::GetAtt': [sinkBucketLogicalId(template), 'Arn'] }, template),
  );
  return statements.some((statement) => {
    if (![statement.Action].flat().includes(call.action)) return false;
    const resources = [statement.Resource].flat().map((r) => String(resolveIntrinsics(r, template)));
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

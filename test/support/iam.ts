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
  /** Request condition keys the call carries (`s3:if-none-match` on a write-once put). */
  readonly context?: Readonly<Record<string, string>>;
}

export type Statement = {
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
};

type Template = Parameters<typeof resolveIntrinsics>[1];

const PARTIQL_ACTIONS: Record<string, string> = {
  INSERT: 'dynamodb:PartiQLInsert',
  UPDATE: 'dynamodb:PartiQLUpdate',
  DELETE: 'dynamodb:PartiQLDelete',
  SELECT: 'dynamodb:PartiQLSelect',
};

/**
 * A PartiQL statement as IAM sees it: its action by its verb, and the partition key it names, as a parameter
 * (`'pk': ?`, the n-th `?` of the statement) or a literal (`'pk': 'x'`); a statement that names none is recorded
 * with an empty key, which no LeadingKeys condition allows.
 */
function partiqlAction({
  Statement,
  Parameters = [],
}: {
  Statement: string;
  Parameters?: unknown[];
}): [string, string] {
  const verb = Statement.trim().split(/\s+/)[0]!.toUpperCase();
  const action = PARTIQL_ACTIONS[verb] ?? `dynamodb:PartiQL${verb}`;
  const literal = /['"]pk['"]\s*(?::|=)\s*'([^']*)'/.exec(Statement);
  if (literal) return [action, literal[1]!];
  const placeholder = /['"]pk['"]\s*(?::|=)\s*\?/.exec(Statement);
  if (!placeholder) return [action, ''];
  const index = (Statement.slice(0, placeholder.index).match(/\?/g) ?? []).length;
  return [action, String(Parameters[index] ?? '')];
}

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
    case 'BatchExecuteStatementCommand':
      // IAM authorises each statement by its PartiQL action, on the item whose pk it names.
      return (input.Statements as Array<{ Statement: string; Parameters?: unknown[] }>).map(partiqlAction);
    case 'BatchGetItemCommand':
      // IAM authorises a BatchGetItem on every key it reads.
      return Object.values(input.RequestItems as Record<string, { Keys: Array<{ pk?: unknown }> }>).flatMap(
        ({ Keys }) => Keys.map((k): [string, string] => ['dynamodb:BatchGetItem', String(k.pk)]),
      );
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
    case 'CompleteMultipartUploadCommand':
      // S3 sets s3:if-none-match only on a PutObject or CompleteMultipartUpload that sends the header.
      return [
        {
          action: 's3:PutObject',
          target: String(input.Key),
          leadingKeys: [],
          ...(input.IfNoneMatch === undefined
            ? {}
            : { context: { 's3:if-none-match': String(input.IfNoneMatch) } }),
        },
      ];
    case 'CopyObjectCommand': {
      // IAM authorises a copy as s3:GetObject on the source and s3:PutObject on the destination; since S3's
      // conditional copies (2025-10-29) a copy that sends If-None-Match carries s3:if-none-match as a PutObject does.
      const source = decodeURI(String(input.CopySource)).replace(/^\//, '');
      const sourceKey = source.slice(source.indexOf('/') + 1);
      return [
        { action: 's3:GetObject', target: sourceKey, leadingKeys: [] },
        {
          action: 's3:PutObject',
          target: String(input.Key),
          leadingKeys: [],
          ...(input.IfNoneMatch === undefined
            ? {}
            : { context: { 's3:if-none-match': String(input.IfNoneMatch) } }),
        },
      ];
    }
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

// ── A small policy evaluator ─────────────────────────────────────────────────────────────────────────────────
//
// A MODEL of IAM's same-account evaluation, not IAM: an explicit Deny in the identity or the resource policy
// wins; otherwise an Allow in either allows; otherwise the request is implicitly denied. It knows only what the
// stack's policies use: Action/Resource globs (`*`, `?`), Principal `*` / `{ AWS }` / `{ Service }`, and the
// condition operators StringEquals/Like, StringNotEquals/NotLike, ArnEquals/Like, ArnNotEquals/NotLike, Bool, Null, and
// the `ForAllValues:` / `ForAnyValue:` set qualifiers — with IAM's rules for a key missing from the request (a
// negated operator matches, a positive one does not, `ForAllValues` over no values matches).

export type Decision = 'allow' | 'explicit-deny' | 'implicit-deny';

export interface PolicyStatement {
  Sid?: string;
  Effect?: 'Allow' | 'Deny';
  Action?: string | string[];
  NotAction?: string | string[];
  Resource?: unknown;
  Principal?: unknown;
  Condition?: Record<string, Record<string, unknown>>;
}

export interface AccessRequest {
  /** The calling role's ARN, as the template resolves it (`roleArn`). */
  readonly principal: string;
  readonly action: string;
  /** The full resource ARN: `<bucket ARN>/<key>`, the bucket ARN, or the table ARN. */
  readonly resource: string;
  /** Request context keys besides `aws:PrincipalArn` (taken from `principal`); multi-valued keys as arrays. */
  readonly context?: Readonly<Record<string, string | readonly string[]>>;
}

function globMatch(pattern: string, value: string, ignoreCase = false): boolean {
  const source = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${source}$`, ignoreCase ? 'i' : '').test(value);
}

function asList(value: unknown): unknown[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

function principalMatches(principal: unknown, request: AccessRequest, template: Template): boolean {
  if (principal === undefined) return true; // identity policy: its principal is the role it is attached to
  if (principal === '*') return true;
  const aws = asList((principal as { AWS?: unknown }).AWS).map((p) => String(resolveIntrinsics(p, template)));
  return aws.includes('*') || aws.includes(request.principal);
}

function conditionMatches(
  operator: string,
  key: string,
  expected: unknown,
  request: AccessRequest,
  template: Template,
): boolean {
  const context: Record<string, string | readonly string[]> = {
    'aws:PrincipalArn': request.principal,
    ...request.context,
  };
  const [qualifier, base] = operator.includes(':') ? operator.split(':') : [undefined, operator];
  const values = asList(resolveIntrinsics(expected, template)).map(String);
  const given = context[key];
  const actual = given === undefined ? [] : asList(given).map(String);
  // `Null: {key: "true"}` asks that the request carry no such key; "false", that it carries it.
  if (base === 'Null') return (actual.length === 0) === (values[0] === 'true');
  const negated = /Not/.test(base!);
  const positive = base!.replace('Not', '');
  const test = (value: string): boolean =>
    values.some((pattern) => {
      switch (positive) {
        case 'StringEquals':
        case 'ArnEquals':
        case 'Bool':
          return pattern === value;
        case 'StringLike':
        case 'ArnLike':
          return globMatch(pattern, value);
        default:
          throw new Error(`the IAM model does not know condition operator ${operator}`);
      }
    });
  if (qualifier === 'ForAllValues') return actual.every((value) => (negated ? !test(value) : test(value)));
  if (qualifier === 'ForAnyValue') return actual.some((value) => (negated ? !test(value) : test(value)));
  if (actual.length === 0) return negated;
  const any = actual.some(test);
  return negated ? !any : any;
}

function statementApplies(statement: PolicyStatement, request: AccessRequest, template: Template): boolean {
  if (statement.Action !== undefined) {
    if (!asList(statement.Action).some((a) => globMatch(String(a), request.action, true))) return false;
  } else if (asList(statement.NotAction).some((a) => globMatch(String(a), request.action, true))) {
    return false;
  }
  const resources = asList(statement.Resource).map((r) => String(resolveIntrinsics(r, template)));
  if (!resources.some((r) => globMatch(r, request.resource))) return false;
  if (!principalMatches(statement.Principal, request, template)) return false;
  for (const [operator, entries] of Object.entries(statement.Condition ?? {})) {
    for (const [key, expected] of Object.entries(entries)) {
      if (!conditionMatches(operator, key, expected, request, template)) return false;
    }
  }
  return true;
}

/** The decision for `request` under the caller's identity policy and the resource's policy (same account). */
export function evaluate(
  template: Template,
  identity: readonly PolicyStatement[],
  resourcePolicy: readonly PolicyStatement[],
  request: AccessRequest,
): Decision {
  const applying = [
    ...identity,
    ...resourcePolicy.map((s) => ({ ...s, Principal: s.Principal ?? '*' })),
  ].filter((statement) => statementApplies(statement, request, template));
  if (applying.some((s) => s.Effect === 'Deny')) return 'explicit-deny';
  return applying.some((s) => (s.Effect ?? 'Allow') === 'Allow') ? 'allow' : 'implicit-deny';
}

/** The statements of the bucket policy of the bucket with this logical id. */
export function bucketPolicyStatements(template: Template, bucketLogicalId: string): PolicyStatement[] {
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::S3::BucketPolicy')
    .filter((r) => JSON.stringify(r.Properties!.Bucket) === JSON.stringify({ Ref: bucketLogicalId }))
    .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: PolicyStatement[] }).Statement);
}

/** The role ARN of a function, as the template's policies name it. */
export function roleArnOf(template: Template, functionLogicalId: string): string {
  const fn = template.Resources[functionLogicalId]!;
  return String(resolveIntrinsics(fn.Properties!.Role, template));
}

/**
 * The ledger table, declared from {@link LEDGER_TABLE_LAYOUT}: the same object the local parts create their table
 * from, so the deployed keys and TTL attribute cannot drift from what the code reads and writes. A table brought
 * to the pipeline (`table` prop) is checked against the same layout where its definition is known.
 */
import { type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import { LEDGER_TABLE_LAYOUT } from '../shared/ledger/layout.ts';

export interface LedgerTableOptions {
  readonly removalPolicy: RemovalPolicy;
  readonly deletionProtection: boolean;
  readonly pointInTimeRecovery: boolean;
  /** A customer-managed key; the AWS-owned key without it. */
  readonly encryptionKey?: kms.IKey;
}

export function createLedgerTable(scope: Construct, id: string, options: LedgerTableOptions): dynamodb.Table {
  return new dynamodb.Table(scope, id, {
    partitionKey: { name: LEDGER_TABLE_LAYOUT.partitionKey, type: dynamodb.AttributeType.STRING },
    sortKey: { name: LEDGER_TABLE_LAYOUT.sortKey, type: dynamodb.AttributeType.STRING },
    billingMode:
      LEDGER_TABLE_LAYOUT.billingMode === 'PAY_PER_REQUEST'
        ? dynamodb.BillingMode.PAY_PER_REQUEST
        : dynamodb.BillingMode.PROVISIONED,
    // Idempotency claims carry `expiresAt` (epoch seconds); DynamoDB deletes them after it (P4).
    timeToLiveAttribute: LEDGER_TABLE_LAYOUT.timeToLiveAttribute,
    pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: options.pointInTimeRecovery },
    deletionProtection: options.deletionProtection,
    removalPolicy: options.removalPolicy,
    ...(options.encryptionKey
      ? { encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED, encryptionKey: options.encryptionKey }
      : // AWS-owned key: encrypted at rest with no KMS requests to pay for.
        { encryption: dynamodb.TableEncryption.DEFAULT }),
  });
}

/** What the ledger needs of a table, for error messages. */
export const LEDGER_TABLE_NEEDS = `partition key ${LEDGER_TABLE_LAYOUT.partitionKey} (S), sort key ${LEDGER_TABLE_LAYOUT.sortKey} (S), TTL on ${LEDGER_TABLE_LAYOUT.timeToLiveAttribute}`;

interface KeyElement {
  readonly attributeName: string;
  readonly keyType: string;
}
interface AttributeDefinition {
  readonly attributeName: string;
  readonly attributeType: string;
}

/**
 * What is wrong with a brought table's keys and TTL, read from its CloudFormation resource (`Table` and
 * `TableV2` alike). `undefined` when the table is imported (`Table.fromTableName`…): its layout is not known at
 * synth, and the user is trusted with it (docs/deploy.md says what it must be).
 */
export function ledgerLayoutProblems(table: dynamodb.ITable): string[] | undefined {
  const resource = table.node.defaultChild;
  if (!(resource instanceof dynamodb.CfnTable || resource instanceof dynamodb.CfnGlobalTable))
    return undefined;
  const stack = Stack.of(table);
  const keySchema = (stack.resolve(resource.keySchema) ?? []) as KeyElement[];
  const attributes = (stack.resolve(resource.attributeDefinitions) ?? []) as AttributeDefinition[];
  const ttl = stack.resolve(resource.timeToLiveSpecification) as
    | { attributeName?: string; enabled?: boolean }
    | undefined;
  const problems: string[] = [];
  const expect = (keyType: string, name: string) => {
    const key = keySchema.find((element) => element.keyType === keyType);
    const type = attributes.find(
      (attribute) => attribute.attributeName === key?.attributeName,
    )?.attributeType;
    const role = keyType === 'HASH' ? 'partition key' : 'sort key';
    if (key?.attributeName !== name || type !== 'S') {
      problems.push(`its ${role} is ${key ? `${key.attributeName} (${type})` : 'missing'}`);
    }
  };
  expect('HASH', LEDGER_TABLE_LAYOUT.partitionKey);
  expect('RANGE', LEDGER_TABLE_LAYOUT.sortKey);
  if (ttl?.attributeName !== LEDGER_TABLE_LAYOUT.timeToLiveAttribute || ttl.enabled !== true) {
    problems.push(`its TTL is ${ttl?.enabled ? `on ${ttl.attributeName}` : 'off'}`);
  }
  return problems;
}

/**
 * The ledger table, declared from {@link LEDGER_TABLE_LAYOUT}: the same object the local parts create their table
 * from, so the deployed keys and TTL attribute cannot drift from what the code reads and writes.
 */
import type { RemovalPolicy } from 'aws-cdk-lib';
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

/**
 * Helpers of the claims-ahead tests (ledger and processor): keyed record specs and their digests, claim lists,
 * and AWS clients with a middleware of the test's own at the initialize step (before the SDK's retries), which the
 * interleavings use to withhold, delay or refuse a call.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { ClaimItem } from '../../shared/ledger/records.ts';
import { recordDigest } from '../../shared/processor/evaluate.ts';
import { order, type RecordSpec } from './msk.ts';

/** A record of `partition` at `offset` whose idempotency key (header) is `key`, an order by default. */
export const keyedSpec = (
  partition: number,
  offset: number,
  key: string,
  value = order(key),
): RecordSpec => ({
  partition,
  offset,
  key,
  value,
  headers: { 'idempotency-key': key },
});

/** The digest the processor gives a keyed spec's record (what its claim names). */
export const digestOfSpec = (spec: RecordSpec) =>
  recordDigest({
    rawKey: Buffer.from(spec.key!).toString('base64'),
    rawValue: Buffer.from(spec.value!).toString('base64'),
  });

/** Claims of `count` records of orders-0 from offset 0, key `k<offset>`, live until `expiresAt` (seconds). */
export function claimsLiveUntil(count: number, expiresAt: number): ClaimItem[] {
  return Array.from({ length: count }, (_, offset) => ({
    idempotencyKey: `k${offset}`,
    claimant: `orders#0#${offset}`,
    digest: `d${offset}`,
    expiresAt,
  }));
}

/** A string parameter or attribute value as middleware sees it: plain (document client) or typed. */
export const plain = (value: unknown): unknown =>
  typeof value === 'object' && value !== null && 'S' in value ? (value as { S: unknown }).S : value;

export type DynamoMiddleware = InitializeMiddleware<object, MetadataBearer>;

/** Clients whose DynamoDB (or S3) client runs `middleware` at the initialize step (before the SDK's retries). */
export function clientsWith(
  name: string,
  middleware: DynamoMiddleware,
  service: 'dynamodb' | 's3' = 'dynamodb',
): AwsClients {
  const clients = createAwsClients();
  (clients[service].middlewareStack as unknown as MiddlewareStack<object, MetadataBearer>).add(middleware, {
    step: 'initialize',
    name,
  });
  return clients;
}

/**
 * `base` with a DynamoDB client of its own whose calls pass through `spy` (before and after each call, before the
 * SDK's retries): a test runs another invocation exactly between two calls of this one.
 */
export function spiedClients(
  base: AwsClients,
  name: string,
  spy: (command: string, input: unknown, call: () => Promise<unknown>) => Promise<unknown>,
): AwsClients {
  const { dynamodb } = clientsWith(
    name,
    (next, context) => async (args) =>
      (await spy(String(context.commandName), args.input, () => next(args))) as Awaited<
        ReturnType<typeof next>
      >,
  );
  return { ...base, dynamodb };
}

/** Key `key`'s claim item (generation 0) in `table`, read strongly consistently; undefined when there is none. */
export async function readClaim(
  at: { readonly clients: AwsClients; readonly table: string },
  pipeline: string,
  key: string,
) {
  const { Item } = await ledgerDocumentClient(at.clients.dynamodb).send(
    new GetCommand({ TableName: at.table, Key: keys.claim(pipeline, key), ConsistentRead: true }),
  );
  return Item as { claimant?: string; expiresAt?: number; holders?: Set<string> } | undefined;
}

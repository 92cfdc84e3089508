/**
 * The call counter's write units of transactions, against DynamoDB Local: what AWS bills (2 units per started KB of
 * each item) for the shapes the pipeline writes, from the figure Local reports (4 per started KB of the items'
 * sum), and 2 an item when the transaction is refused.
 */
import { DynamoDBDocumentClient, PutCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CallCounter, transactionUnitsOf } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
let clients: AwsClients;
let doc: DynamoDBDocumentClient;

beforeAll(async () => {
  res = await freshResources('counter');
  clients = createAwsClients();
  doc = DynamoDBDocumentClient.from(clients.dynamodb);
}, 60_000);

afterAll(() => {
  clients.dynamodb.destroy();
  clients.s3.destroy();
});

/** A Put of an item of about `bytes` bytes (its keys and their names are about 32). */
function put(bytes: number) {
  const item = { pk: uniqueName('item'), sk: 'sk-000000000', data: 'x'.repeat(Math.max(1, bytes - 32)) };
  return { Put: { TableName: res.table, Item: item } };
}

async function unitsOf(items: ReturnType<typeof put>[]): Promise<CallCounter> {
  const calls = new CallCounter().attach(clients);
  await doc.send(new TransactWriteCommand({ TransactItems: items }));
  return calls;
}

describe('transactionUnits', () => {
  it('a transaction of one small item counts 2', async () => {
    const calls = await unitsOf([put(100)]);
    expect(calls.transactionUnits()).toBe(2);
    expect(calls.transactionItems()).toBe(1);
  });

  it('two small items count 2 each, though Local reports one KB for both', async () => {
    const calls = await unitsOf([put(100), put(100)]);
    expect(calls.transactionUnits()).toBe(4);
  });

  it('a 3000 B and a 100 B item count 8: 2 a started KB of each', async () => {
    const calls = await unitsOf([put(3000), put(100)]);
    expect(calls.transactionUnits()).toBe(8);
    expect(calls.transactionItems()).toBe(2);
  });

  it('one item of 1100 B counts 4: two KB started', async () => {
    const calls = await unitsOf([put(1100)]);
    expect(calls.transactionUnits()).toBe(4);
  });

  it('sums over transactions and starts again at reset', async () => {
    const calls = new CallCounter().attach(clients);
    await doc.send(new TransactWriteCommand({ TransactItems: [put(100)] }));
    await doc.send(new TransactWriteCommand({ TransactItems: [put(3000), put(100)] }));
    expect(calls.transactionUnits()).toBe(10);
    calls.reset();
    expect(calls.transactionUnits()).toBe(0);
  });

  it('a refused transaction counts 2 an item, whatever their size', async () => {
    const existing = put(100);
    await doc.send(new TransactWriteCommand({ TransactItems: [existing] }));
    const calls = new CallCounter().attach(clients);
    const refused = { Put: { ...existing.Put, ConditionExpression: 'attribute_not_exists(pk)' } };
    await expect(
      doc.send(new TransactWriteCommand({ TransactItems: [refused, put(3000)] })),
    ).rejects.toMatchObject({ name: 'TransactionCanceledException' });
    expect(calls.transactionUnits()).toBe(4);
    expect(calls.snapshot()).toEqual({ 'dynamodb:TransactWriteItems': 1 });
  });

  it('single writes are not transaction units', async () => {
    const calls = new CallCounter().attach(clients);
    await doc.send(new TransactWriteCommand({ TransactItems: [put(100)] }));
    const single = put(1100).Put;
    await doc.send(new PutCommand({ TableName: single.TableName, Item: single.Item }));
    expect(calls.transactionUnits()).toBe(2);
    expect(calls.singleWriteUnits()).toBe(2);
  });
});

describe('transactionUnitsOf', () => {
  it('is 2 an item without a report, and half the report when that is more', () => {
    expect(transactionUnitsOf(3, undefined)).toBe(6);
    expect(transactionUnitsOf(2, 4)).toBe(4);
    expect(transactionUnitsOf(2, 28)).toBe(14);
  });
});

describe('busyMs', () => {
  it('counts the time calls of an operation were in flight once, however many overlapped', async () => {
    const calls = new CallCounter().attach(clients);
    const started = performance.now();
    await Promise.all(
      Array.from({ length: 8 }, () =>
        doc.send(new PutCommand({ TableName: res.table, Item: put(100).Put.Item })),
      ),
    );
    const wall = performance.now() - started;
    const busy = calls.busyMs()['dynamodb:PutItem']!;
    // Eight overlapping calls each last most of the wall time: summed, they would be several times it.
    expect(busy).toBeGreaterThan(0);
    expect(busy).toBeLessThanOrEqual(wall);
    expect(Object.keys(calls.busyMs())).toEqual(['dynamodb:PutItem']);
  });

  it('adds up calls one after another, and forgets them on reset', async () => {
    const calls = new CallCounter().attach(clients);
    const single = async () => {
      const before = performance.now();
      await doc.send(new PutCommand({ TableName: res.table, Item: put(100).Put.Item }));
      return performance.now() - before;
    };
    const durations = [await single(), await single(), await single()];
    const busy = calls.busyMs()['dynamodb:PutItem']!;
    // Each call's span inside the middleware is within the span around it.
    expect(busy).toBeLessThanOrEqual(durations.reduce((a, b) => a + b, 0));
    expect(busy).toBeGreaterThan(Math.max(...durations) * 0.5);
    calls.reset();
    expect(calls.busyMs()).toEqual({});
  });

  it('counts a call in flight across a reset from the reset on', async () => {
    const calls = new CallCounter().attach(clients);
    // Holds each request 150 ms before it is sent, so the call is surely in flight when the counter resets.
    clients.dynamodb.middlewareStack.add(
      (next) => async (args) => {
        await new Promise((resolve) => setTimeout(resolve, 150));
        return next(args);
      },
      { step: 'finalizeRequest', name: 'testSlowRequest' },
    );
    try {
      const pending = doc.send(new PutCommand({ TableName: res.table, Item: put(100).Put.Item }));
      await new Promise((resolve) => setTimeout(resolve, 75));
      const sinceReset = performance.now();
      calls.reset();
      await pending;
      const afterReset = performance.now() - sinceReset;
      expect(calls.busyMs()['dynamodb:PutItem']!).toBeLessThanOrEqual(afterReset);
    } finally {
      clients.dynamodb.middlewareStack.remove('testSlowRequest');
    }
  });
});

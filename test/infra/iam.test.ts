/**
 * Least privilege checked against behaviour, for the processor and the monitor (the coordinator steps are in
 * `state-machine-iam.test.ts`): every AWS call they make on the local parts is allowed by the policy the
 * synthesized stack gives their role — action, table leading key, object key.
 */

import { DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { systemClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { RELEASED } from '../../shared/ledger/staging-ledger.ts';
import { runMonitor } from '../../shared/observability/monitor.ts';
import { createTelemetry } from '../../shared/observability/telemetry.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { type Call, isAllowed, recordCalls, roleStatements } from '../support/iam.ts';
import { BASE_PROPS, testApp } from '../support/infra.ts';
import { mskEvent, order, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('iam-proc');
});

function deployed(props: Partial<ExactlyOncePipelineProps> = {}) {
  const stack = new ExactlyOncePipelineStack(testApp(), 'Iam', { pipeline: { ...BASE_PROPS, ...props } });
  const template = Template.fromStack(stack).toJSON() as Parameters<typeof roleStatements>[0];
  const idOf = (fn: { node: { defaultChild?: unknown } }) =>
    stack.getLogicalId(fn.node.defaultChild as never);
  return {
    template,
    processor: roleStatements(template, idOf(stack.pipeline.processor)),
    monitor: roleStatements(template, idOf(stack.pipeline.monitor)),
  };
}

describe('processor and monitor IAM', () => {
  it('grants the exactly-once processor every call it makes, claims ahead and in the transaction, and nothing on final/', async () => {
    const stack = deployed();
    for (const claimWrite of ['ahead', 'in-transaction'] as const) {
      const settings = parseSettings({
        ledgerTable: res.table,
        bucket: res.bucket,
        pipelineId: 'orders',
        claimWrite,
      });
      const clients = createAwsClients();
      const calls: Call[] = [];
      recordCalls(clients, (found) => calls.push(...found));
      const processor = createProcessor({ settings, clients });
      const from = claimWrite === 'ahead' ? 0 : 100;
      await processor.processEvent(
        mskEvent([
          ...orderRecords(0, from, 5),
          {
            partition: 0,
            offset: from + 5,
            value: order('dup'),
            headers: { 'idempotency-key': `p0-o${from}` },
          },
          { partition: 1, offset: from, value: 'not json' },
        ]),
      );
      const actions = new Set(calls.map((c) => c.action));
      // Claims ahead are created in batches of PartiQL INSERTs; in the transaction they are its Puts.
      expect([...actions].sort(), claimWrite).toEqual([
        'dynamodb:GetItem',
        ...(claimWrite === 'ahead' ? ['dynamodb:PartiQLInsert'] : []),
        'dynamodb:PutItem',
        'dynamodb:UpdateItem',
        's3:PutObject',
      ]);
      expect(
        calls.filter((call) => !isAllowed(stack.template, stack.processor, call)),
        claimWrite,
      ).toEqual([]);
    }
    // The check can fail: exactly-once never writes final objects, and the grant says so.
    expect(
      isAllowed(stack.template, stack.processor, {
        action: 's3:PutObject',
        target: 'orders/final/x',
        leadingKeys: [],
      }),
    ).toBe(false);
  });

  it('grants the exactly-once processor the claim release of a batch that fails for good and the state read that dead-letters an add to a text field', async () => {
    const stack = deployed();
    const settings = parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId: 'orders' });
    // Partition 5: a note on a state item already at DynamoDB's 400 KB limit (its record dead-lettered after the
    // claim went ahead: the claim is released). Partition 6: a field set as text, then added to (the add is refused
    // and its record dead-lettered after a read of the state item).
    const transform: Transform = {
      name: 'iam-paths',
      apply(record) {
        const key = `iam-${record.partition}`;
        const state =
          record.value === 'add'
            ? [{ key, fields: {}, add: { total: 1 } }]
            : [{ key, fields: { note: 'n'.repeat(1000), total: 'n/a' }, add: {} }];
        return { kind: 'ok', rows: [{ offset: record.offset }], state };
      },
    };
    await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
      new PutCommand({
        TableName: res.table,
        Item: { ...keys.state('orders', 'iam-5'), stateKey: 'iam-5', blob: 'b'.repeat(409_000) },
      }),
    );
    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    const processor = createProcessor({ settings, clients, transform });
    const keyed = (partition: number, offset: number, value: string) => ({
      partition,
      offset,
      value,
      headers: { 'idempotency-key': `iam-${partition}-${offset}` },
    });
    const refused = await processor.processEvent(mskEvent([keyed(5, 0, 'set')]));
    expect(refused.partitions[0]).toMatchObject({ stagedRows: 0, deadLettered: 1, stagedOffset: 0 });
    const report = await processor.processEvent(mskEvent([keyed(6, 0, 'set'), keyed(6, 1, 'add')]));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 1, deadLettered: 1, stagedOffset: 1 });
    // The release happened (the key is free again: expired), by UpdateItem.
    const { Item: claim } = await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
      new GetCommand({ TableName: res.table, Key: keys.claim('orders', 'iam-5-0') }),
    );
    expect(claim).toMatchObject({ claimant: 'orders#5#0', expiresAt: RELEASED });
    expect(
      calls.some((c) => c.action === 'dynamodb:GetItem' && c.leadingKeys.some((k) => k.includes('#STATE#'))),
    ).toBe(true);
    expect(calls.filter((call) => !isAllowed(stack.template, stack.processor, call))).toEqual([]);
  });

  it('grants the processor its key-window reads and writes (partition-scoped idempotency), on those keys only', async () => {
    const stack = deployed({ idempotencyScope: 'partition' });
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: 'orders',
      idempotencyScope: 'partition',
    });
    await createProcessor({ settings, clients: createAwsClients() }).processEvent(
      mskEvent(orderRecords(7, 0, 3)),
    );
    // A cold container reads the window (one Query) and writes a bucket in its transaction.
    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    await createProcessor({ settings, clients }).processEvent(mskEvent(orderRecords(7, 3, 2)));
    expect(calls.filter((c) => c.leadingKeys.some((k) => k.includes('#KEYS#'))).map((c) => c.action)).toEqual(
      ['dynamodb:Query', 'dynamodb:PutItem'],
    );
    expect(calls.filter((call) => !isAllowed(stack.template, stack.processor, call))).toEqual([]);
    // The Query grant is on the key window only: not on fences, claims or state.
    expect(
      isAllowed(stack.template, stack.processor, {
        action: 'dynamodb:Query',
        target: 'table',
        leadingKeys: ['orders#FENCE'],
      }),
    ).toBe(false);
  });

  it('grants the at-least-once processor the final objects it writes directly', async () => {
    const stack = deployed({ deliveryGuarantee: 'at-least-once' });
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: 'orders',
      deliveryGuarantee: 'at-least-once',
    });
    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    await createProcessor({ settings, clients }).processEvent(mskEvent(orderRecords(2, 0, 3)));
    expect(calls.some((c) => c.target.startsWith('orders/final/'))).toBe(true);
    expect(calls.filter((call) => !isAllowed(stack.template, stack.processor, call))).toEqual([]);
  });

  it('grants the monitor the ledger reads it makes, and no write', async () => {
    const stack = deployed();
    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    await runMonitor({
      dynamodb: clients.dynamodb,
      table: res.table,
      pipeline: 'orders',
      clock: systemClock,
      telemetry: createTelemetry({ pipeline: 'orders', component: 'monitor' }),
    });
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.filter((call) => !isAllowed(stack.template, stack.monitor, call))).toEqual([]);
    expect(
      isAllowed(stack.template, stack.monitor, {
        action: 'dynamodb:PutItem',
        target: 'table',
        leadingKeys: ['orders#FENCE'],
      }),
    ).toBe(false);
  });
});

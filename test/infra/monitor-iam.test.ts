/**
 * The monitor reads only what it reports from: every DynamoDB call it makes on a real ledger (a committed
 * checkpoint, then more staged data) is allowed by the policy the synthesized stack gives its role, and nothing
 * else of the pipeline is readable: not the idempotency claims (business keys), keyed state, key windows or replay
 * plans.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { afterEach, beforeAll, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { runMonitor } from '../../shared/observability/monitor.ts';
import { createTelemetry } from '../../shared/observability/telemetry.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { type Call, isAllowed, recordCalls, roleStatements } from '../support/iam.ts';
import { BASE_PROPS, testApp } from '../support/infra.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
let stdout: MockInstance<typeof process.stdout.write>;
beforeAll(async () => {
  res = await freshResources('monitor-iam');
});
beforeEach(() => {
  stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
});
afterEach(() => stdout.mockRestore());

const stack = new ExactlyOncePipelineStack(testApp(), 'Monitor', {
  pipeline: { ...BASE_PROPS, mskVpcId: 'vpc-0123456789abcdef0' },
});
const template = Template.fromStack(stack).toJSON() as Parameters<typeof roleStatements>[0];
const monitorPolicy = roleStatements(
  template,
  stack.getLogicalId(stack.pipeline.monitor.node.defaultChild as never),
);
const monitorMay = (call: Call) => isAllowed(template, monitorPolicy, call);

describe("the monitor's role", () => {
  it('allows every read the monitor makes of a real ledger', async () => {
    const settings = parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId: 'orders' });
    const clock = new ManualClock(Date.now());
    const deployed = synthesizeCoordinator();
    const local = createLocalCoordinator({
      settings,
      clients: res.clients,
      clock,
      ...deployed.runOptions,
    });
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 4), ...orderRecords(1, 0, 4)]));
    expect((await local.runCheckpoint()).status).toBe('committed');
    await processor.processEvent(mskEvent(orderRecords(0, 4, 2)));

    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    const telemetry = createTelemetry({ pipeline: 'orders', component: 'monitor' });
    const report = await runMonitor({
      dynamodb: clients.dynamodb,
      table: res.table,
      pipeline: 'orders',
      clock,
      telemetry,
    });
    expect(report.uncommittedRecords).toBe(2);
    expect(report.lastCommitAgeSeconds).toBeDefined();
    const kinds = new Set(calls.map((c) => c.leadingKeys[0]!.split('#')[1]));
    expect([...kinds].sort()).toEqual(['CHECKPOINT', 'FENCE', 'STAGED']);
    expect(calls.filter((call) => !monitorMay(call))).toEqual([]);
  });

  it('reads no claim, keyed state, key window or replay plan', () => {
    const secrets = [
      keys.claim('orders', 'customer-42@example.com').pk,
      keys.state('orders', 'customer-1').pk,
      'orders#KEYS#orders#3',
      keys.replayPk('orders'),
    ];
    for (const pk of secrets) {
      for (const action of ['dynamodb:GetItem', 'dynamodb:Query']) {
        expect(monitorMay({ action, target: 'table', leadingKeys: [pk] }), `${action} ${pk}`).toBe(false);
      }
    }
    // What it does read stays readable, and never another pipeline's.
    expect(
      monitorMay({
        action: 'dynamodb:GetItem',
        target: 'table',
        leadingKeys: [keys.checkpointHead('orders').pk],
      }),
    ).toBe(true);
    expect(
      monitorMay({
        action: 'dynamodb:Query',
        target: 'table',
        leadingKeys: [keys.checkpointPk('orders-eu')],
      }),
    ).toBe(false);
  });
});

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
import { type SynthesizedCoordinator, synthesizeCoordinator } from './support/asl.ts';
import { freshResources, type TestResources } from './support/aws.ts';
import { type Call, isAllowed, recordCalls, roleStatements } from './support/iam.ts';
import { mskEvent, orderRecords } from './support/msk.ts';

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('iam');
  deployed = synthesizeCoordinator();
});

function allowed(step: CoordinatorStep, call: Call): boolean {
  const fn = deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never);
  return isAllowed(deployed.template, roleStatements(deployed.template, fn), call);
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
    recordCalls(clients, record);
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
    // And nothing is granted that no step calls (a grant like ConditionCheckItem, once kept "just in case").
    const called = new Set(calls.map(({ call }) => call.action));
    const granted = new Set(
      COORDINATOR_STEPS.flatMap((step) => {
        const fn = deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never);
        return roleStatements(deployed.template, fn).flatMap((st) => [st.Action].flat());
      }).filter((action) => /^(dynamodb|s3):/.test(action)),
    );
    expect([...granted].filter((action) => !called.has(action))).toEqual([]);
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

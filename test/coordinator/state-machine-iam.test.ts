/**
 * Least privilege, checked against behaviour: every AWS call each coordinator step makes in a local run (commit,
 * abort with an orphan sweep, recovery) is allowed by the IAM policy the synthesized stack gives that step's
 * function — action, table or object key, leading key and list prefix — and every object write is allowed by the
 * deployed pipeline's bucket policy too (its role there, and its `If-None-Match` header: manifests and final
 * objects are write-once), while the same write without the header is refused.
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { COORDINATOR_STEPS, type CoordinatorStep } from '../../shared/coordinator/definition.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix, manifestsPrefix, stagedObjectKey } from '../../shared/sink/layout.ts';
import { resolveIntrinsics, type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import {
  bucketPolicyStatements,
  type Call,
  evaluate,
  isAllowed,
  type PolicyStatement,
  recordCalls,
  roleArnOf,
  roleStatements,
  sinkBucketLogicalId,
} from '../support/iam.ts';
import { BASE_PROPS, testApp } from '../support/infra.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { stageFiles } from '../support/staging.ts';

type StepCall = { step: CoordinatorStep; call: Call };

let res: TestResources;
let deployed: SynthesizedCoordinator;
let calls: StepCall[];

beforeAll(async () => {
  res = await freshResources('iam');
  deployed = synthesizeCoordinator();
  calls = await recordStepCalls();
});

function allowed(step: CoordinatorStep, call: Call): boolean {
  const fn = deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never);
  return isAllowed(deployed.template, roleStatements(deployed.template, fn), call);
}

/** A commit, an abort with an orphan sweep, and a recovery, each call recorded with the step that made it. */
async function recordStepCalls(): Promise<StepCall[]> {
  // The synthesized stack scopes to pipeline "orders": this file's table and bucket are its own.
  const settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: 'orders',
    orphanGraceSeconds: 60,
  });
  const clients = createAwsClients();
  const recorded: StepCall[] = [];
  let current: CoordinatorStep | undefined;
  recordCalls(clients, (found) => {
    if (current) for (const call of found) recorded.push({ step: current, call });
  });
  const clock = new ManualClock(Date.now() + 120_000);
  let failPrepare = true;
  const local = createLocalCoordinator({
    settings,
    clients,
    clock,
    ...deployed.runOptions,
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
  // A partition whose entries are items (the processor keeps them inline in its fence until a budget, items after).
  await stageFiles(res.clients, settings, [{ partition: 2, firstOffset: 0, lastOffset: 3 }]);
  const orphan = stagedObjectKey(
    'orders',
    { stream: 'output', topic: 'orders', partition: 0, firstOffset: 0, lastOffset: 3 },
    'dead',
    true,
  );
  await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: orphan, Body: 'x' }));

  expect((await local.runCheckpoint()).status).toBe('aborted');
  failPrepare = false;
  expect((await local.runCheckpoint()).status).toBe('committed');
  // Recovery: a checkpoint left BEGUN by a crashed execution, aborted by the next one's begin.
  await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 4, 2)));
  current = 'begin';
  await local.coordinator.begin({ execution: 'crashed' });
  clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
  expect((await local.runCheckpoint()).status).toBe('committed');
  return recorded;
}

describe('coordinator IAM', () => {
  it('grants each step every action it performs, on exactly the keys and prefixes it touches', () => {
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

  it("allows every object write each step makes under the deployed pipeline's bucket policy (write-once included), and refuses it without If-None-Match", () => {
    const stack = new ExactlyOncePipelineStack(testApp(), 'BucketPolicy', {
      pipeline: { ...BASE_PROPS, mskVpcId: 'vpc-0123456789abcdef0' },
    });
    const template = Template.fromStack(stack).toJSON() as Parameters<typeof roleStatements>[0];
    const bucketId = sinkBucketLogicalId(template);
    const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, template));
    const bucketPolicy = bucketPolicyStatements(template, bucketId);
    const decide = (step: CoordinatorStep, call: Call) => {
      const fn = stack.getLogicalId(stack.pipeline.coordinator.functions[step].node.defaultChild as never);
      return evaluate(template, roleStatements(template, fn) as PolicyStatement[], bucketPolicy, {
        principal: roleArnOf(template, fn),
        action: call.action,
        resource: `${bucketArn}/${call.target}`,
        context: { 'aws:SecureTransport': 'true', ...call.context },
      });
    };
    const writes = calls.filter(({ call }) => /^s3:(Put|Delete)Object$/.test(call.action));
    const committed = writes.filter(
      ({ call }) =>
        call.action === 's3:PutObject' &&
        (call.target.startsWith(manifestsPrefix('orders')) || call.target.startsWith(finalPrefix('orders'))),
    );
    // The run wrote manifests and final objects, so the check below has something to judge.
    expect(new Set(committed.map(({ step }) => step))).toEqual(new Set(['promote', 'commit']));
    const refused = writes.filter(({ step, call }) => decide(step, call) !== 'allow');
    expect(refused).toEqual([]);
    // The same committed writes without the header are refused, to their own writer.
    for (const { step, call } of committed) {
      expect(decide(step, { ...call, context: {} }), `${step} ${call.target}`).toBe('explicit-deny');
    }
  });
});

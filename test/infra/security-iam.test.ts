/**
 * Every role can write only what its step must, enforced on both sides: for every role of the
 * synthesized stack × every sensitive key or prefix — manifests, final data, coordinator work, staged streams,
 * the checkpoint head, records and cut pages, fences, staged entries, claims, keyed state — the identity policy
 * and the bucket policy together (`evaluate` in `support/iam.ts`, a model of IAM) allow exactly the writers the
 * layout names and deny everyone else; an over-broad role elsewhere in the account is denied by the bucket policy
 * alone. Both outcomes are asserted, so a matrix that allowed nothing, or everything, fails.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import type { ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { autoDeleteHandlerRoleArn } from '../../infra/security.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { COORDINATOR_STEPS } from '../../shared/coordinator/definition.ts';
import { candidateKey, planKey, promotedKey } from '../../shared/coordinator/work-objects.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { finalObjectKey, manifestKey, type ObjectRange, stagedObjectKey } from '../../shared/sink/layout.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import {
  type AccessRequest,
  bucketPolicyStatements,
  type Decision,
  evaluate,
  type PolicyStatement,
  roleArnOf,
  roleStatements,
  sinkBucketLogicalId,
} from '../support/iam.ts';
import { BASE_PROPS, testApp } from '../support/infra.ts';

const PL = 'orders';
const range = (stream: 'output' | 'deadletter'): ObjectRange => ({
  stream,
  topic: 'orders',
  partition: 3,
  firstOffset: 100,
  lastOffset: 199,
});

const STAGED_OUTPUT = stagedObjectKey(PL, range('output'), 'attempt-1', true);

/** The sensitive objects, one representative key each, built by the layout's own functions. */
const OBJECTS = {
  manifest: manifestKey(PL, 7),
  finalData: finalObjectKey(PL, range('output'), true),
  finalDeadLetter: finalObjectKey(PL, range('deadletter'), true),
  plan: planKey(PL, 7, 1, 0, 'a'.repeat(64)),
  promoted: promotedKey(PL, 7, 1, 0),
  // What promote copies into place (and what the write boundaries protect): a final object's bytes, merged by
  // prepare from the staged bytes it verified.
  candidate: candidateKey(PL, 7, 1, 'b'.repeat(64)),
  stagedOutput: STAGED_OUTPUT,
  stagedDeadLetter: stagedObjectKey(PL, range('deadletter'), 'attempt-1', true),
} as const;
type ObjectName = keyof typeof OBJECTS;

/** The sensitive ledger items, by partition key. */
const ITEMS = {
  checkpointHead: keys.checkpointHead(PL).pk,
  checkpointRecord: keys.checkpoint(PL, 7).pk,
  cutPage: keys.cutPagesPk(PL, 'cut-1'),
  fence: keys.fence(PL, 'orders', 3).pk,
  legacyFence: keys.legacyFence(PL, 'orders', 3).pk,
  stagedEntry: keys.stagedPk(PL, 'orders', 3),
  claim: keys.claim(PL, 'order-42').pk,
  state: keys.state(PL, 'customer-1').pk,
} as const;
type ItemName = keyof typeof ITEMS;

type Role = 'processor' | 'monitor' | (typeof COORDINATOR_STEPS)[number];
const ROLES: readonly Role[] = ['processor', 'monitor', ...COORDINATOR_STEPS];

/** Who may put (create or overwrite) each object, and who may delete it: the layout's boundaries. */
const OBJECT_WRITERS: Record<ObjectName, { put: Role[]; delete: Role[] }> = {
  manifest: { put: ['commit'], delete: [] },
  finalData: { put: ['promote'], delete: [] },
  finalDeadLetter: { put: ['promote'], delete: [] },
  plan: { put: ['prepare', 'promote'], delete: ['cleanup', 'abort'] },
  promoted: { put: ['prepare', 'promote'], delete: ['cleanup', 'abort'] },
  candidate: { put: ['prepare', 'promote'], delete: ['cleanup', 'abort'] },
  stagedOutput: { put: ['processor'], delete: ['cleanup', 'abort'] },
  stagedDeadLetter: { put: ['processor'], delete: ['cleanup', 'abort'] },
};
const COORDINATOR: Role[] = [...COORDINATOR_STEPS];
/** Who may write (put, update or delete) items under each partition key. */
const ITEM_WRITERS: Record<ItemName, Role[]> = {
  checkpointHead: COORDINATOR,
  checkpointRecord: COORDINATOR,
  cutPage: ['begin', 'prepare', 'decide', 'promote', 'commit', 'cleanup', 'abort'],
  // Cleanup and abort remove committed staged entries kept inline in a (sharded) fence item: an UpdateItem.
  fence: ['processor', 'cleanup', 'abort'],
  legacyFence: ['processor'],
  stagedEntry: ['processor', 'cleanup', 'abort'],
  claim: ['processor'],
  state: ['processor'],
};

function synthesized(props: Partial<ExactlyOncePipelineProps> = {}) {
  const stack = new ExactlyOncePipelineStack(testApp(), 'Security', {
    pipeline: { ...BASE_PROPS, ...props },
  });
  const template = Template.fromStack(stack).toJSON() as Parameters<typeof roleStatements>[0];
  const pipeline = stack.pipeline;
  const functions: Record<Role, { node: { defaultChild?: unknown } }> = {
    processor: pipeline.processor,
    monitor: pipeline.monitor,
    ...pipeline.coordinator.functions,
  };
  const logicalId = (role: Role) => stack.getLogicalId(functions[role].node.defaultChild as never);
  const bucketId = sinkBucketLogicalId(template);
  const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, template));
  const tableId = stack.getLogicalId(pipeline.table.node.defaultChild as never);
  const tableArn = String(resolveIntrinsics({ 'Fn::GetAtt': [tableId, 'Arn'] }, template));
  const bucketPolicy = bucketPolicyStatements(template, bucketId);
  const decide = (identity: readonly PolicyStatement[], request: AccessRequest): Decision =>
    evaluate(template, identity, request.resource.startsWith(bucketArn) ? bucketPolicy : [], request);
  const asRole = (role: Role) => ({
    principal: roleArnOf(template, logicalId(role)),
    identity: roleStatements(template, logicalId(role)) as PolicyStatement[],
  });
  // Every put the pipeline makes under _manifests/ and final/ is write-once (`If-None-Match: *`).
  const objectRequest = (principal: string, action: string, key: string): AccessRequest => ({
    principal,
    action,
    resource: `${bucketArn}/${key}`,
    context: { 'aws:SecureTransport': 'true', 's3:if-none-match': '*' },
  });
  const itemRequest = (principal: string, action: string, pk: string): AccessRequest => ({
    principal,
    action,
    resource: tableArn,
    context: { 'dynamodb:LeadingKeys': [pk] },
  });
  return { stack, template, asRole, decide, objectRequest, itemRequest, bucketArn, bucketPolicy };
}

const ITEM_WRITES = ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'];

describe('write boundaries, identity and bucket policy together (exactly-once)', () => {
  const s = synthesized();

  it.each(ROLES)('role %s puts and deletes exactly the objects its step writes', (role) => {
    const { principal, identity } = s.asRole(role);
    for (const [name, key] of Object.entries(OBJECTS) as Array<[ObjectName, string]>) {
      const put = s.decide(identity, s.objectRequest(principal, 's3:PutObject', key));
      const del = s.decide(identity, s.objectRequest(principal, 's3:DeleteObject', key));
      // Every sensitive object lies under a protected prefix: a role that is not its writer is denied by the
      // bucket policy explicitly, whatever its identity policy says.
      const expected = (writers: Role[]): Decision => (writers.includes(role) ? 'allow' : 'explicit-deny');
      expect(put, `${role} put ${name}`).toBe(expected(OBJECT_WRITERS[name].put));
      expect(del, `${role} delete ${name}`).toBe(expected(OBJECT_WRITERS[name].delete));
      // Nobody may remove a version: committed data stays recoverable (only lifecycle expires versions).
      expect(
        s.decide(identity, s.objectRequest(principal, 's3:DeleteObjectVersion', key)),
        `${role} delete a version of ${name}`,
      ).not.toBe('allow');
    }
  });

  it.each(ROLES)('role %s writes exactly the ledger items its component owns', (role) => {
    const { principal, identity } = s.asRole(role);
    for (const [name, pk] of Object.entries(ITEMS) as Array<[ItemName, string]>) {
      const writes = ITEM_WRITES.filter(
        (action) => s.decide(identity, s.itemRequest(principal, action, pk)) === 'allow',
      );
      expect(writes.length > 0, `${role} writes ${name} (${writes.join(', ')})`).toBe(
        ITEM_WRITERS[name].includes(role),
      );
      // Another pipeline's items are never reachable.
      const foreign = pk.replace(/^orders#/, 'orders-eu#');
      for (const action of [...ITEM_WRITES, 'dynamodb:GetItem']) {
        expect(
          s.decide(identity, s.itemRequest(principal, action, foreign)),
          `${role} ${action} ${foreign}`,
        ).not.toBe('allow');
      }
    }
  });

  it('leaves a compromised processor no way to forge a checkpoint: no plan, manifest, final object or checkpoint item', () => {
    // The two attacks on the commit path, on the permission side: rewrite a plan so promote writes a manifest, or write a
    // COMMITTED head with a far-future cut. Each is denied, explicitly by the bucket policy for the objects.
    const { principal, identity } = s.asRole('processor');
    for (const key of [OBJECTS.plan, OBJECTS.promoted, OBJECTS.manifest, OBJECTS.finalData]) {
      expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', key)), key).toBe('explicit-deny');
    }
    for (const pk of [ITEMS.checkpointHead, ITEMS.checkpointRecord, ITEMS.cutPage]) {
      for (const action of ITEM_WRITES) {
        expect(s.decide(identity, s.itemRequest(principal, action, pk)), `${action} ${pk}`).toBe(
          'implicit-deny',
        );
      }
    }
    // What it must do still works: stage its output and advance its own fence.
    expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', OBJECTS.stagedOutput))).toBe(
      'allow',
    );
    expect(s.decide(identity, s.itemRequest(principal, 'dynamodb:UpdateItem', ITEMS.fence))).toBe('allow');
    // And read the checkpoint head: whether the coordinator reads staged entries kept inline (inline-gate.ts).
    expect(s.decide(identity, s.itemRequest(principal, 'dynamodb:GetItem', ITEMS.checkpointHead))).toBe(
      'allow',
    );
  });

  it("keeps the candidates promote copies out of the processor's reach, and promote off the staged prefix", () => {
    const candidate = OBJECTS.candidate;
    expect(candidate.startsWith(`${PL}/_coordinator/`), candidate).toBe(true);
    const can = (role: Role, action: string, key: string): Decision => {
      const { principal, identity } = s.asRole(role);
      return s.decide(identity, s.objectRequest(principal, action, key));
    };
    // The processor can neither replace nor remove a candidate (the bucket policy denies it explicitly), nor read one.
    expect(can('processor', 's3:PutObject', candidate)).toBe('explicit-deny');
    expect(can('processor', 's3:DeleteObject', candidate)).toBe('explicit-deny');
    expect(can('processor', 's3:GetObject', candidate)).toBe('implicit-deny');
    // Prepare reads the staged objects and writes the candidates (a retried prepare reads what it wrote).
    expect(can('prepare', 's3:GetObject', OBJECTS.stagedOutput)).toBe('allow');
    expect(can('prepare', 's3:PutObject', candidate)).toBe('allow');
    expect(can('prepare', 's3:GetObject', candidate)).toBe('allow');
    // Promote copies the candidate (s3:GetObject on the source), and reads nothing under the staged prefix.
    expect(can('promote', 's3:GetObject', candidate)).toBe('allow');
    expect(can('promote', 's3:GetObject', OBJECTS.stagedOutput)).toBe('implicit-deny');
    expect(can('promote', 's3:GetObject', OBJECTS.stagedDeadLetter)).toBe('implicit-deny');
    // Cleanup and abort delete candidates; nobody deletes a version of one.
    expect(can('cleanup', 's3:DeleteObject', candidate)).toBe('allow');
    expect(can('abort', 's3:DeleteObject', candidate)).toBe('allow');
    expect(can('cleanup', 's3:DeleteObjectVersion', candidate)).not.toBe('allow');
    // Another pipeline's candidates are out of reach of this pipeline's prepare and promote.
    const foreign = candidateKey('orders-eu', 7, 1, 'c'.repeat(64));
    expect(can('prepare', 's3:PutObject', foreign)).toBe('implicit-deny');
    expect(can('promote', 's3:GetObject', foreign)).toBe('implicit-deny');
  });

  it('denies the bucket policy side alone: an over-broad role elsewhere in the account writes no protected prefix', () => {
    const admin: PolicyStatement[] = [{ Effect: 'Allow', Action: 's3:*', Resource: '*' }];
    const principal = 'arn:aws:iam::123456789012:role/data-team-admin';
    for (const [name, key] of Object.entries(OBJECTS)) {
      for (const action of ['s3:PutObject', 's3:DeleteObject', 's3:DeleteObjectVersion', 's3:PutObjectAcl']) {
        expect(s.decide(admin, s.objectRequest(principal, action, key)), `${action} ${name}`).toBe(
          'explicit-deny',
        );
      }
      // Reading stays a matter of identity policies.
      expect(s.decide(admin, s.objectRequest(principal, 's3:GetObject', key)), `read ${name}`).toBe('allow');
    }
    // The boundary is per prefix, not a blanket deny: an unrelated key is the admin's to write.
    expect(s.decide(admin, s.objectRequest(principal, 's3:PutObject', 'scratch/notes.txt'))).toBe('allow');
  });

  it("lets the commit role write manifests only over TLS, and never another pipeline's", () => {
    const { principal, identity } = s.asRole('commit');
    const request = s.objectRequest(principal, 's3:PutObject', OBJECTS.manifest);
    expect(s.decide(identity, request)).toBe('allow');
    expect(s.decide(identity, { ...request, context: { 'aws:SecureTransport': 'false' } })).toBe(
      'explicit-deny',
    );
    expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', manifestKey('orders-eu', 7)))).toBe(
      'implicit-deny',
    );
  });

  it('exempts no one from the boundaries when the bucket is retained', () => {
    expect(autoDeleteHandlerRoleArn(s.stack)).toBeUndefined();
    const boundaries = s.bucketPolicy.filter((st) => st.Sid?.startsWith('OnlyWriters'));
    const exemptions = boundaries.map((st) =>
      st.Condition === undefined ? 0 : asArray(st.Condition.ArnNotEquals!['aws:PrincipalArn']).length,
    );
    // Puts, then deletes, of: manifests (commit | nobody), final data (promote | nobody), coordinator work
    // (prepare, promote | cleanup, abort), staged (processor | cleanup, abort). Nobody: no condition at all.
    expect(exemptions).toEqual([1, 0, 1, 0, 2, 2, 1, 2]);
    // Write-once exempts nobody under exactly-once.
    const writeOnce = s.bucketPolicy.filter((st) => st.Sid?.startsWith('WriteOnce'));
    expect(writeOnce.map((st) => st.Condition)).toEqual([
      { StringNotEquals: { 's3:if-none-match': '*' } },
      { StringNotEquals: { 's3:if-none-match': '*' } },
    ]);
  });
});

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [value];
}

describe('write boundaries under the weaker guarantees and a destroyable bucket', () => {
  it('lets the at-least-once processor write final data directly, and still no manifest', () => {
    const s = synthesized({ deliveryGuarantee: 'at-least-once' });
    const { principal, identity } = s.asRole('processor');
    expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', OBJECTS.finalData))).toBe('allow');
    expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', OBJECTS.manifest))).not.toBe(
      'allow',
    );
    expect(s.decide(identity, s.objectRequest(principal, 's3:PutObject', OBJECTS.plan))).not.toBe('allow');
  });

  it("lets CDK's auto-delete handler empty a destroyable bucket, versions included, and nobody else", () => {
    const s = synthesized({ removalPolicy: 'destroy' });
    const handler = String(resolveIntrinsics(s.stack.resolve(autoDeleteHandlerRoleArn(s.stack)), s.template));
    expect(handler).toMatch(/AutoDeleteObjects/);
    const handlerIdentity: PolicyStatement[] = [];
    for (const key of Object.values(OBJECTS)) {
      for (const action of ['s3:DeleteObject', 's3:DeleteObjectVersion']) {
        // Its own grant comes from CDK's bucket policy Allow; the boundaries must not deny it.
        expect(s.decide(handlerIdentity, s.objectRequest(handler, action, key)), `${action} ${key}`).toBe(
          'allow',
        );
      }
    }
    const { principal, identity } = s.asRole('cleanup');
    expect(s.decide(identity, s.objectRequest(principal, 's3:DeleteObject', OBJECTS.finalData))).not.toBe(
      'allow',
    );
  });
});

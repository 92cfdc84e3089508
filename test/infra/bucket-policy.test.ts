/**
 * The sink bucket's policy protects committed data from the bucket side too, judged by the IAM model of
 * `support/iam.ts` on the synthesized template:
 * - bucket-level changes that would undo every boundary or expire committed objects (the bucket policy itself,
 *   lifecycle, versioning, replication, …) are denied to every principal but the one that deploys the stack
 *   (CloudFormation's execution role) or the `bucketAdminPrincipals` named instead;
 * - manifests and final objects are write-once at the IAM layer: a put without `If-None-Match: *` (an overwrite,
 *   or a copy, which S3 authorises as a put) is refused even to their writer;
 * - "nobody deletes" is an unconditional deny, not a condition over an empty list.
 */
import { DefaultStackSynthesizer, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ExactlyOncePipeline, type ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { BUCKET_ADMIN_ACTIONS } from '../../infra/security.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { finalObjectKey, manifestKey, stagedObjectKey } from '../../shared/sink/layout.ts';
import { ACCOUNT, REGION, resolveIntrinsics } from '../support/asl.ts';
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

type TemplateJson = Parameters<typeof roleStatements>[0];

const RANGE = { stream: 'output', topic: 'orders', partition: 3, firstOffset: 100, lastOffset: 199 } as const;
const MANIFEST = manifestKey('orders', 7);
const FINAL = finalObjectKey('orders', RANGE, true);
const STAGED = stagedObjectKey('orders', RANGE, 'attempt-1', true);
const EXEC_ROLE = `arn:aws:iam::${ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-${ACCOUNT}-${REGION}`;
const ADMIN: PolicyStatement[] = [{ Effect: 'Allow', Action: 's3:*', Resource: '*' }];
const DATA_TEAM = `arn:aws:iam::${ACCOUNT}:role/data-team-admin`;

function synthesized(props: Partial<ExactlyOncePipelineProps> = {}, stack?: Stack) {
  const scope = stack ?? new Stack(testApp(), 'Bucket');
  const pipeline = new ExactlyOncePipeline(scope, 'Pipeline', {
    ...BASE_PROPS,
    mskVpcId: 'vpc-0123456789abcdef0',
    ...props,
  });
  const template = Template.fromStack(scope).toJSON() as TemplateJson;
  const bucketId = sinkBucketLogicalId(template);
  const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, template));
  const policy = bucketPolicyStatements(template, bucketId);
  const fnId = (fn: { node: { defaultChild?: unknown } }) =>
    scope.getLogicalId(fn.node.defaultChild as never);
  const role = (fn: { node: { defaultChild?: unknown } }) => ({
    principal: roleArnOf(template, fnId(fn)),
    identity: roleStatements(template, fnId(fn)) as PolicyStatement[],
  });
  const decide = (
    who: { principal: string; identity: readonly PolicyStatement[] },
    action: string,
    key: string | undefined,
    context: Record<string, string> = {},
  ): Decision => {
    const request: AccessRequest = {
      principal: who.principal,
      action,
      resource: key === undefined ? bucketArn : `${bucketArn}/${key}`,
      context: { 'aws:SecureTransport': 'true', ...context },
    };
    return evaluate(template, who.identity, policy, request);
  };
  return { pipeline, template, policy, role, decide };
}

describe('bucket-level changes', () => {
  const s = synthesized();

  it('are denied to every principal but the deploying one (CloudFormation execution role)', () => {
    for (const action of [
      's3:PutBucketPolicy',
      's3:DeleteBucketPolicy',
      's3:PutLifecycleConfiguration',
      's3:PutBucketVersioning',
      's3:PutReplicationConfiguration',
    ]) {
      expect(BUCKET_ADMIN_ACTIONS).toContain(action);
      expect(s.decide({ principal: DATA_TEAM, identity: ADMIN }, action, undefined), action).toBe(
        'explicit-deny',
      );
      expect(s.decide({ principal: EXEC_ROLE, identity: ADMIN }, action, undefined), action).toBe('allow');
      // No role of the pipeline may change the bucket either.
      const commit = s.role(s.pipeline.coordinator.functions.commit);
      expect(s.decide(commit, action, undefined), `commit ${action}`).not.toBe('allow');
    }
    // Reading the bucket's configuration stays a matter of identity policies.
    expect(s.decide({ principal: DATA_TEAM, identity: ADMIN }, 's3:GetBucketPolicy', undefined)).toBe(
      'allow',
    );
  });

  it('are allowed to the bucketAdminPrincipals instead, when given', () => {
    const ops = `arn:aws:iam::${ACCOUNT}:role/platform-admin`;
    const named = synthesized({ bucketAdminPrincipals: [ops] });
    expect(named.decide({ principal: ops, identity: ADMIN }, 's3:PutLifecycleConfiguration', undefined)).toBe(
      'allow',
    );
    expect(
      named.decide({ principal: EXEC_ROLE, identity: ADMIN }, 's3:PutLifecycleConfiguration', undefined),
    ).toBe('explicit-deny');
    expect(() => synthesized({ bucketAdminPrincipals: [] })).toThrow(InvalidSettingError);
    expect(() => synthesized({ bucketAdminPrincipals: ['ops'] })).toThrow(/bucketAdminPrincipals/);
  });

  it('name the execution role of the synthesizer the stack deploys with (its qualifier)', () => {
    const stack = new Stack(testApp(), 'Qualified', {
      synthesizer: new DefaultStackSynthesizer({ qualifier: 'team7' }),
    });
    const q = synthesized({}, stack);
    const role = `arn:aws:iam::${ACCOUNT}:role/cdk-team7-cfn-exec-role-${ACCOUNT}-${REGION}`;
    expect(q.decide({ principal: role, identity: ADMIN }, 's3:PutBucketPolicy', undefined)).toBe('allow');
    expect(q.decide({ principal: EXEC_ROLE, identity: ADMIN }, 's3:PutBucketPolicy', undefined)).toBe(
      'explicit-deny',
    );
  });

  it('are guarded once per bucket, however many pipelines share it', () => {
    const stack = new Stack(testApp(), 'Shared');
    const first = new ExactlyOncePipeline(stack, 'Orders', {
      ...BASE_PROPS,
      mskVpcId: 'vpc-0123456789abcdef0',
    });
    new ExactlyOncePipeline(stack, 'Payments', {
      ...BASE_PROPS,
      mskVpcId: 'vpc-0123456789abcdef0',
      pipelineId: 'payments',
      bucket: first.bucket,
      table: first.table,
    });
    const template = Template.fromStack(stack).toJSON() as TemplateJson;
    const policy = bucketPolicyStatements(template, sinkBucketLogicalId(template));
    const guards = policy.filter((st) => [st.Action].flat().includes('s3:PutBucketPolicy'));
    expect(guards).toHaveLength(1);
  });
});

describe('committed objects are write-once at the IAM layer', () => {
  const s = synthesized();
  const commit = s.role(s.pipeline.coordinator.functions.commit);
  const promote = s.role(s.pipeline.coordinator.functions.promote);
  const writeOnce = { 's3:if-none-match': '*' };

  it('a manifest: commit writes it only with If-None-Match: *', () => {
    expect(s.decide(commit, 's3:PutObject', MANIFEST, writeOnce)).toBe('allow');
    expect(s.decide(commit, 's3:PutObject', MANIFEST)).toBe('explicit-deny');
  });

  it('a final object: promote writes it only with If-None-Match: * (its copy of a candidate sends the header)', () => {
    expect(s.decide(promote, 's3:PutObject', FINAL, writeOnce)).toBe('allow');
    expect(s.decide(promote, 's3:PutObject', FINAL)).toBe('explicit-deny');
  });

  it('staged objects are not write-once (the processor rewrites nothing there, but the prefix is not committed)', () => {
    const processor = s.role(s.pipeline.processor);
    expect(s.decide(processor, 's3:PutObject', STAGED)).toBe('allow');
  });

  it('nobody deletes a manifest or final object: an unconditional deny, not a condition over an empty list', () => {
    const deletes = s.policy.filter(
      (st) =>
        st.Effect === 'Deny' &&
        [st.Action].flat().includes('s3:DeleteObject') &&
        JSON.stringify(st.Resource).match(/_manifests|final/),
    );
    expect(deletes).toHaveLength(2);
    for (const st of deletes) expect(st.Condition).toBeUndefined();
    expect(s.decide({ principal: EXEC_ROLE, identity: ADMIN }, 's3:DeleteObject', MANIFEST)).toBe(
      'explicit-deny',
    );
  });
});

describe('under the weaker guarantees and a destroyable bucket', () => {
  it("holds the at-least-once processor's direct final writes to write-once too: it sends If-None-Match: *", () => {
    const s = synthesized({ deliveryGuarantee: 'at-least-once' });
    const processor = s.role(s.pipeline.processor);
    const promote = s.role(s.pipeline.coordinator.functions.promote);
    const writeOnce = { 's3:if-none-match': '*' };
    expect(s.decide(processor, 's3:PutObject', FINAL, writeOnce)).toBe('allow');
    expect(s.decide(processor, 's3:PutObject', FINAL)).toBe('explicit-deny');
    expect(s.decide(promote, 's3:PutObject', FINAL)).toBe('explicit-deny');
    expect(s.decide(processor, 's3:PutObject', MANIFEST, writeOnce)).toBe('explicit-deny');
  });

  it("lets CDK's auto-delete handler deny writes before emptying a destroyable bucket", () => {
    const s = synthesized({ removalPolicy: 'destroy' });
    const exempt = s.policy.find(
      (st) => st.Effect === 'Deny' && [st.Action].flat().includes('s3:PutBucketPolicy'),
    )!;
    const names = JSON.stringify(resolveIntrinsics(exempt.Condition, s.template));
    expect(names).toMatch(/AutoDeleteObjects/);
    expect(names).toMatch(/cfn-exec-role/);
  });
});

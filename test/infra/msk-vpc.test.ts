/**
 * An MSK source needs its VPC: the mapping's pollers create and delete network interfaces with the processor's
 * role, and only the `ec2:Vpc` condition keeps that from every subnet of the account. Without it synth stops,
 * naming the setting as the user spells it (`-c mskVpcId`, `mskVpcId`, `source.vpcId`); without a mapping there
 * are no pollers and nothing to scope.
 */
import { Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ExactlyOncePipeline } from '../../infra/exactly-once-pipeline.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { allStatements, CLUSTER_ARN, testApp } from '../support/infra.ts';

const VPC = 'vpc-0123456789abcdef0';

describe('an MSK source without its VPC', () => {
  it('stops synth from context, naming -c mskVpcId', () => {
    const app = testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders' });
    expect(() => new ExactlyOncePipelineStack(app, 'NoVpc')).toThrow(
      /^invalid setting -c mskVpcId: required for an MSK source/,
    );
  });

  it('stops synth from props, naming mskVpcId or source.vpcId', () => {
    const props = { topic: 'orders' } as const;
    const stack = new Stack(testApp(), 'Props');
    expect(() => new ExactlyOncePipeline(stack, 'A', { ...props, mskClusterArn: CLUSTER_ARN })).toThrow(
      InvalidSettingError,
    );
    expect(() => new ExactlyOncePipeline(stack, 'B', { ...props, mskClusterArn: CLUSTER_ARN })).toThrow(
      /invalid setting mskVpcId: required/,
    );
    expect(
      () =>
        new ExactlyOncePipeline(stack, 'C', { ...props, source: { kind: 'msk', clusterArn: CLUSTER_ARN } }),
    ).toThrow(/invalid setting source\.vpcId: required/);
  });

  it('is fine with no mapping (no pollers), and with the VPC the pollers are scoped to it', () => {
    const none = testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders', eventSourceMapping: 'false' });
    expect(() => new ExactlyOncePipelineStack(none, 'NoMapping')).not.toThrow();
    const app = testApp({ mskClusterArn: CLUSTER_ARN, topic: 'orders', mskVpcId: VPC });
    const template = Template.fromStack(new ExactlyOncePipelineStack(app, 'WithVpc'));
    const eni = allStatements(template).find((s) => [s.Action].flat().includes('ec2:CreateNetworkInterface'));
    expect(JSON.stringify(eni?.Condition)).toContain(`:vpc/${VPC}`);
  });
});

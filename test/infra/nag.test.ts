/**
 * cdk-nag's AwsSolutions pack on the synthesized stack: zero findings left unacknowledged, and every
 * acknowledgement names one finding and carries a written reason.
 */
import { Validations } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { unacknowledgedNagFindings } from '../../infra/nag.ts';
import { synthesize } from '../support/infra.ts';

interface Acknowledgement {
  readonly id: string;
  readonly reason: string;
}

/** Acknowledgements as CDK stores them: per construct, a map `Annotation::<finding id>` → reason. */
function acknowledgements(root: IConstruct): Array<Acknowledgement & { path: string }> {
  return root.node.findAll().flatMap((node) =>
    node.node.metadata
      .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
      .flatMap((entry) => Object.entries(entry.data as Record<string, string>))
      .map(([key, reason]) => ({ id: key.replace(/^Annotation::/, ''), reason, path: node.node.path })),
  );
}

describe('cdk-nag AwsSolutions', () => {
  it.each([
    ['an imported cluster (the default settings)', {}],
    [
      'an MSK Serverless sandbox with a customer-managed key',
      { mskClusterArn: undefined, mskVpcId: undefined, sandboxCluster: true, encryption: 'kms' as const },
    ],
    [
      'at-least-once delivery, destroyable, with alarm email',
      {
        deliveryGuarantee: 'at-least-once' as const,
        removalPolicy: 'destroy' as const,
        alarmEmail: 'ops@example.com',
      },
    ],
  ])('finds nothing unacknowledged for %s', (_name, props) => {
    const { stack } = synthesize(props, { nag: true });
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });

  it('reports findings without the acknowledgements (the check is live)', () => {
    const { stack } = synthesize({}, { nag: false });
    const findings = unacknowledgedNagFindings(stack);
    expect(findings.some((f) => f.startsWith('AwsSolutions-IAM5[') && f.includes('/ProcessorRole/'))).toBe(
      true,
    );
    // No AWS managed policy anywhere: every role's grants are written out.
    expect(findings.filter((f) => f.startsWith('AwsSolutions-IAM4['))).toEqual([]);
    expect(
      findings.some((f) => f.startsWith('AwsSolutions-IAM5[Resource::') && f.includes('_inprogress')),
    ).toBe(true);
  });

  it.each([
    ['the default settings', {}],
    [
      'a sandbox with a customer-managed key',
      { mskClusterArn: undefined, mskVpcId: undefined, sandboxCluster: true, encryption: 'kms' as const },
    ],
    ['at-least-once', { deliveryGuarantee: 'at-least-once' as const }],
  ])('acknowledges only findings that exist, on the construct that has them (%s)', (_name, props) => {
    const findings = unacknowledgedNagFindings(synthesize(props, { nag: false }).stack).map((f) => {
      const [id, path] = f.split(' at ');
      return { id: id!, path: path! };
    });
    const { stack } = synthesize(props, { nag: true });
    // (CDK itself acknowledges CloudFormation validator warnings on some constructs: not ours, not nag's.)
    for (const ack of acknowledgements(stack).filter((a) => a.id.startsWith('AwsSolutions-'))) {
      expect(
        findings.some((f) => f.id === ack.id && f.path.startsWith(`${ack.path}/`)),
        `${ack.id} at ${ack.path}`,
      ).toBe(true);
    }
  });

  it('acknowledges only named findings, each with a written reason, never a whole rule stack-wide', () => {
    const { stack } = synthesize({}, { nag: true });
    const acks = acknowledgements(stack);
    expect(acks.length).toBeGreaterThan(10);
    for (const ack of acks) {
      expect(ack.id).toMatch(/^AwsSolutions-IAM[45]\[(Policy|Resource|Action)::.+\]$/);
      expect(ack.reason.length, ack.id).toBeGreaterThan(60);
      expect(ack.path).not.toBe(stack.node.path);
    }
  });
});

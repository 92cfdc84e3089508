/**
 * What a transform's schema registry needs at run time is granted to exactly who decodes with it: the processor
 * (and a replay processor) decodes every record, and operator roles decode dead letters again in `eos redrive`. A
 * Secrets Manager secret with the registry's credentials is readable by them and nobody else, and nothing else
 * of Secrets Manager; the stack stays cdk-nag clean.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { acknowledgeNagFindings, unacknowledgedNagFindings } from '../../infra/nag.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { actionsOf, allStatements, CLUSTER_ARN, testApp, VPC_ID } from '../support/infra.ts';

const ACCOUNT = CLUSTER_ARN.split(':')[4]!;
const OPS = `arn:aws:iam::${ACCOUNT}:role/ops`;
const SECRET = `arn:aws:secretsmanager:us-east-1:${ACCOUNT}:secret:registry/reader`;

const dir = mkdtempSync(join(tmpdir(), 'eos-registry-grants-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function transformWithSecret(): string {
  const file = join(dir, 'payments.ts');
  writeFileSync(
    file,
    [
      `import { defineTransform } from ${JSON.stringify(resolve('shared/transforms/api.ts'))};`,
      'export default defineTransform({',
      "  name: 'confluent-payments',",
      `  value: { format: 'avro', registry: { kind: 'confluent', url: 'https://registry.internal', basicAuthSecret: '${SECRET}' } },`,
      "  schema: { id: 'string' },",
      '  transform: () => ({ rows: [] }),',
      '});',
    ].join('\n'),
  );
  return file;
}

function synth(transform: string, operators: boolean) {
  const app = testApp({
    mskClusterArn: CLUSTER_ARN,
    mskVpcId: VPC_ID,
    topic: 'orders',
    transform,
    ...(operators ? { operatorRoleArns: OPS } : {}),
  });
  const stack = new ExactlyOncePipelineStack(app, 'Registry');
  acknowledgeNagFindings(stack.pipeline);
  const template = Template.fromStack(stack);
  return { stack, statements: allStatements(template) };
}

const withAction = (statements: ReturnType<typeof allStatements>, prefix: string) =>
  statements.filter((s) => actionsOf(s).some((a) => a.startsWith(prefix)));

describe("a transform's registry credentials in Secrets Manager", () => {
  it('are readable by the processor and the operator roles only, on that secret only, cdk-nag clean', () => {
    const { stack, statements } = synth(transformWithSecret(), true);
    const reads = withAction(statements, 'secretsmanager:');
    expect(reads.length).toBe(2); // the processor's policy and the operator role's
    for (const statement of reads) {
      expect(actionsOf(statement)).toEqual(['secretsmanager:GetSecretValue']);
      expect(JSON.stringify(stack.resolve(statement.Resource))).toBe(
        JSON.stringify([SECRET, `${SECRET}-??????`]),
      );
    }
    expect(new Set(reads.map((s) => s.policy)).size).toBe(2);
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });

  it('grant nothing of Secrets Manager to a transform that names no secret', () => {
    const { statements } = synth('test/fixtures/infra/page-views.ts#pageViews', true);
    expect(withAction(statements, 'secretsmanager:')).toEqual([]);
  });
});

describe("a transform's Glue registry", () => {
  it('is read by the operator roles too (eos redrive decodes dead letters again), cdk-nag clean', () => {
    const { stack, statements } = synth('test/fixtures/infra/glue-payments.ts', true);
    const reads = withAction(statements, 'glue:');
    expect(reads.length).toBe(2);
    for (const statement of reads) expect(actionsOf(statement)).toEqual(['glue:GetSchemaVersion']);
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });

  it('is read by the processor alone without operator roles', () => {
    const { statements } = synth('test/fixtures/infra/glue-payments.ts', false);
    expect(withAction(statements, 'glue:').length).toBe(1);
  });
});

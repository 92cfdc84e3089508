/**
 * The `iceberg` prop from the repository's CDK context (`-c icebergCatalog=glue`, …): the keys set the prop's
 * fields, errors name the key as the user passed it, and a key without `icebergCatalog` is refused, not ignored.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { CLUSTER_ARN, resourcesOf, testApp } from '../support/infra.ts';

const BASE = {
  mskClusterArn: CLUSTER_ARN,
  mskVpcId: 'vpc-0123456789abcdef0',
  topic: 'orders',
  outputFormat: 'parquet',
};

function stackFrom(context: Record<string, unknown>): ExactlyOncePipelineStack {
  return new ExactlyOncePipelineStack(testApp({ ...BASE, ...context }), 'FromContext');
}

function stackError(context: Record<string, unknown>): string {
  try {
    stackFrom(context);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`no error for ${JSON.stringify(context)}`);
}

describe('the iceberg prop from context', () => {
  it('is none without the keys (an empty key counts as not given)', () => {
    for (const context of [{}, { icebergCatalog: '' }]) {
      const stack = stackFrom(context);
      expect(stack.pipeline.iceberg).toBeUndefined();
      expect(stack.pipeline.coordinator.publishFunction).toBeUndefined();
    }
  });

  it('sets each field from its key', () => {
    const stack = stackFrom({
      icebergCatalog: 'glue',
      icebergDatabase: 'analytics',
      icebergTable: 'orders',
      icebergTablePrefix: 'tables/orders',
      icebergPartitioning: 'none',
    });
    expect(stack.pipeline.iceberg?.config).toEqual({
      catalog: 'glue',
      tablePrefix: 'tables/orders',
      partitioning: 'none',
      glue: { databaseName: 'analytics', tableName: 'orders' },
    });
    const template = Template.fromStack(stack);
    const tables = Object.values(resourcesOf(template, 'AWS::Glue::Table'));
    expect(tables.map((t) => (t.Properties.TableInput as { Name: string }).Name)).toEqual(['orders']);
  });

  it.each([
    [{ icebergTable: 'orders' }, '-c icebergTable: only used with -c icebergCatalog'],
    [{ icebergCatalog: 's3tables' }, '-c icebergCatalog: s3tables cannot be deployed'],
    [{ icebergCatalog: 'glue', outputFormat: 'ndjson' }, "-c icebergCatalog: needs outputFormat 'parquet'"],
    [
      { icebergCatalog: 'file', deliveryGuarantee: 'at-least-once' },
      "-c icebergCatalog: needs deliveryGuarantee 'exactly-once' (got 'at-least-once')",
    ],
    [{ icebergCatalog: 'glue', icebergTable: 'Orders' }, '-c icebergTable: lower-case letters'],
    [{ icebergCatalog: 'file', icebergDatabase: 'x' }, "-c icebergDatabase: only used with catalog 'glue'"],
    [
      { icebergCatalog: 'file', icebergTablePrefix: 'orders/final' },
      '-c icebergTablePrefix: must not overlap',
    ],
    [{ icebergCatalog: 'file', icebergPartitioning: 'day' }, '-c icebergPartitioning:'],
    [{ icebergcatalog: 'glue' }, '-c icebergcatalog: unknown setting (did you mean icebergCatalog?)'],
  ])('refuses %j naming the key', (context, message) => {
    expect(stackError(context)).toContain(`invalid setting ${message}`);
  });
});

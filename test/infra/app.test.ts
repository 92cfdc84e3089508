/**
 * The CDK app as `cdk synth` runs it (`infra/app.ts` in a child process, context through CDK_CONTEXT_JSON as the
 * CLI passes it; bundling skipped to keep it fast — `npm run synth` bundles): a bad setting stops it with a
 * message naming the setting, and a good configuration passes cdk-nag inside the synth itself.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLUSTER_ARN, VPC_ID } from '../support/infra.ts';
import { appSynthesizer } from '../support/synth-app.ts';

const { outdir, synth } = appSynthesizer('eos-synth-');

describe('infra/app.ts', () => {
  it('stops on a missing or malformed setting, naming it', () => {
    const missing = synth({ mskClusterArn: CLUSTER_ARN });
    expect(missing.status).toBe(1);
    expect(missing.stderr.trim()).toBe('invalid setting -c topic: required but not set');
    const malformed = synth({ mskClusterArn: CLUSTER_ARN, topic: 'orders', startingPosition: 'EARLIEST' });
    expect(malformed.status).toBe(1);
    expect(malformed.stderr).toMatch(/^invalid setting -c startingPosition: .*"EARLIEST"/);
  });

  it('stops on a transform module without the named export, in one line naming the module and its exports', () => {
    const result = synth({
      mskClusterArn: CLUSTER_ARN,
      mskVpcId: VPC_ID,
      topic: 'orders',
      transform: './test/fixtures/infra/page-views.ts#pageView',
    });
    expect(result.status).toBe(1);
    expect(result.stderr.trim()).toMatch(
      /^transform module \/.*\/test\/fixtures\/infra\/page-views\.ts has no export "pageView" \(exports: PAGE_VIEWS_MARKER, notATransform, pageViews\)$/,
    );
  });

  it('synthesizes an environment-agnostic stack that passes cdk-nag during synth', () => {
    const ok = synth({
      mskClusterArn: CLUSTER_ARN,
      mskVpcId: VPC_ID,
      topic: 'orders',
      pipelineId: 'payments',
    });
    expect(ok.stderr).not.toMatch(/AwsSolutions-/);
    expect(ok.status).toBe(0);
    const templateFile = join(outdir, 'ExactlyOncePipeline-payments.template.json');
    expect(existsSync(templateFile)).toBe(true);
    const manifest = JSON.parse(readFileSync(join(outdir, 'manifest.json'), 'utf8')) as {
      artifacts: Record<string, { type: string; environment?: string }>;
    };
    expect(manifest.artifacts['ExactlyOncePipeline-payments']?.environment).toBe(
      'aws://unknown-account/unknown-region',
    );
  });
});

/**
 * The stack with bundling ON, as `npm run synth` and `cdk deploy` build it: every Lambda gets a bundle of its own
 * entry that exports its handler, within the size the benchmark measures. (The other infra tests skip bundling.)
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { ExactlyOncePipelineStack, PIPELINE_FEATURE_FLAGS } from '../infra/stack.ts';
import { BASE_PROPS, resourcesOf } from './infra-fixtures.ts';

const outdir = mkdtempSync(join(tmpdir(), 'eos-synth-'));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

describe('bundled Lambda code', () => {
  it('gives each function a bundle of its own entry that exports its handler', () => {
    const app = new App({
      outdir,
      builtinCloudFormationValidation: false,
      context: { ...PIPELINE_FEATURE_FLAGS },
    });
    const stack = new ExactlyOncePipelineStack(app, 'Bundled', { pipeline: BASE_PROPS });
    const template = Template.fromStack(stack);
    app.synth();
    const functions = Object.values(resourcesOf(template, 'AWS::Lambda::Function')).map((f) => f.Properties);
    const bundles = new Map<string, string>();
    for (const fn of functions) {
      const key = String((fn.Code as { S3Key: string }).S3Key).replace(/\.zip$/, '');
      const source = bundles.get(key) ?? readFileSync(join(outdir, `asset.${key}`, 'index.mjs'), 'utf8');
      bundles.set(key, source);
      const exported = String(fn.Handler).replace(/^index\./, '');
      const exports = /export\s*\{([^}]*)\}/.exec(source)?.[1] ?? '';
      expect(
        exports.split(',').map((e) =>
          e
            .trim()
            .split(/\s+as\s+/)
            .pop(),
        ),
        String(fn.Handler),
      ).toContain(exported);
      expect(fn.Runtime).toBe('nodejs24.x');
    }
    // processor, monitor, and one bundle shared by the seven coordinator steps
    expect(bundles.size).toBe(3);
    for (const source of bundles.values()) expect(source.length).toBeLessThan(400 * 1024);
  }, 120_000);
});

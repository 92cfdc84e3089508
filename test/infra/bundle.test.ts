/**
 * The stack with bundling ON, as `npm run synth` and `cdk deploy` build it: every Lambda gets a bundle of its own
 * entry that exports its handler, with the locked AWS SDK inside (the SDK the tests ran), within the
 * size the benchmark measures. A bundle is a folder: `index.mjs` and the chunks only a dynamic import loads
 * (`scripts/bundle.mjs`), all of which must be in the asset. (The other infra tests skip bundling.)
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { ExactlyOncePipelineStack, PIPELINE_FEATURE_FLAGS } from '../../infra/stack.ts';
import { bundleFiles } from '../../scripts/bundle.mjs';
import { BASE_PROPS, resourcesOf } from '../support/infra.ts';

/** The version package-lock.json pins for an AWS SDK package: what the tests install and run. */
function lockedVersion(name: string): string {
  const lock = JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8')) as {
    packages: Record<string, { version?: string }>;
  };
  const version = lock.packages[`node_modules/${name}`]?.version;
  if (!version) throw new Error(`${name} is not in package-lock.json`);
  return version;
}

/** Each SDK client's package name and version as esbuild inlines them from its package.json (its user agent). */
function bundledClients(source: string): Map<string, string> {
  return new Map(
    [...source.matchAll(/name:"(@aws-sdk\/client-[a-z0-9-]+)",version:"([^"]+)"/g)].map((m) => [
      m[1]!,
      m[2]!,
    ]),
  );
}

const outdir = mkdtempSync(join(tmpdir(), 'eos-synth-'));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

describe('bundled Lambda code', () => {
  it('gives each function a bundle of its own entry that exports its handler and carries the locked AWS SDK', () => {
    const app = new App({
      outdir,
      builtinCloudFormationValidation: false,
      context: { ...PIPELINE_FEATURE_FLAGS },
    });
    const stack = new ExactlyOncePipelineStack(app, 'Bundled', { pipeline: BASE_PROPS });
    const template = Template.fromStack(stack);
    app.synth();
    const functions = Object.values(resourcesOf(template, 'AWS::Lambda::Function')).map((f) => f.Properties);
    /** Each asset's files: `index.mjs` (the handler module) first, then its chunks. */
    const bundles = new Map<string, string[]>();
    for (const fn of functions) {
      const key = String((fn.Code as { S3Key: string }).S3Key).replace(/\.zip$/, '');
      const files =
        bundles.get(key) ??
        bundleFiles(join(outdir, `asset.${key}`)).map((file) => readFileSync(file, 'utf8'));
      bundles.set(key, files);
      const source = files[0]!;
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
    for (const [key, files] of bundles) {
      const source = files.join('\n');
      // No import of the SDK is left for the runtime to resolve…
      expect(source).not.toMatch(/from\s*"@aws-sdk\//);
      expect(source).not.toMatch(/import\(\s*"@aws-sdk\//);
      // …and the clients inside are the locked ones.
      const clients = bundledClients(source);
      expect([...clients.keys()]).toContain('@aws-sdk/client-dynamodb'); // every function reads the ledger
      for (const [name, version] of clients) expect(version, name).toBe(lockedVersion(name));
      // A guard against a dependency pulled in by mistake (a second SDK, a whole library for one function): the
      // processor's bundle, lazy chunks included, is about 1.05 MB, nine tenths of it zod, the SDK, protobufjs and
      // avro-js, and this project's own code about 0.5 MB (`bench/cold-start.ts` measures what that costs an init).
      expect(source.length).toBeLessThan(1.1 * 1024 * 1024);
      // Every chunk a file imports is in the asset (a relative import the runtime could not resolve fails init).
      for (const file of files) {
        for (const [, chunk] of file.matchAll(/(?:from|import)\s*\(?\s*"\.\/((?:chunks\/)?[\w.-]+\.mjs)"/g)) {
          const inChunks = chunk!.startsWith('chunks/') ? chunk! : `chunks/${chunk}`;
          expect(existsSync(join(outdir, `asset.${key}`, inChunks)), inChunks).toBe(true);
        }
      }
    }
  }, 120_000);
});

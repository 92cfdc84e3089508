/**
 * The construct's `transform` prop: a user's module is bundled into the processor at synth (its code and the
 * handler factory in the processor's `index.mjs`), a built-in keeps the stock processor and `EOS_TRANSFORM`, and
 * every bad setting (missing file, missing export, an export that is not a transform, an unknown built-in) fails
 * synth with a message naming it, before any resource exists: never a cold start.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unacknowledgedNagFindings } from '../../infra/nag.ts';
import {
  ExactlyOncePipelineStack,
  PIPELINE_FEATURE_FLAGS,
  pipelinePropsFromContext,
} from '../../infra/stack.ts';
import { processorEntrySource, resolveTransform, writeProcessorEntry } from '../../infra/transform-entry.ts';
import {
  NotATransformError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../../shared/errors.ts';
import { isTransformDefinition } from '../../shared/transforms/api.ts';
import { actionsOf, allStatements, BASE_PROPS, resourcesOf, synthesize, testApp } from '../support/infra.ts';

const FIXTURE = 'test/fixtures/infra/page-views.ts';
const FIXTURE_PATH = resolve(FIXTURE);
const MARKER = 'page-views-fixture-7f3c';

function processorProperties(template: Template): Record<string, unknown> {
  const functions = Object.values(resourcesOf(template, 'AWS::Lambda::Function')).map((f) => f.Properties);
  const processor = functions.find((fn) => String(fn.Description).startsWith('Stages MSK records'));
  if (!processor) throw new Error('no processor function in the template');
  return processor;
}

function environmentOf(fn: Record<string, unknown>): Record<string, unknown> {
  return (fn.Environment as { Variables: Record<string, unknown> }).Variables;
}

describe('a transform module of the user', () => {
  const outdir = mkdtempSync(join(tmpdir(), 'eos-synth-'));
  let bundle: string;
  let processor: Record<string, unknown>;

  beforeAll(() => {
    const app = new App({
      outdir,
      builtinCloudFormationValidation: false,
      context: { ...PIPELINE_FEATURE_FLAGS },
    });
    const stack = new ExactlyOncePipelineStack(app, 'UserTransform', {
      pipeline: { ...BASE_PROPS, transform: { entry: FIXTURE, exportName: 'pageViews' } },
    });
    const template = Template.fromStack(stack);
    app.synth();
    processor = processorProperties(template);
    const key = String((processor.Code as { S3Key: string }).S3Key).replace(/\.zip$/, '');
    bundle = readFileSync(join(outdir, `asset.${key}`, 'index.mjs'), 'utf8');
  }, 180_000);
  afterAll(() => rmSync(outdir, { recursive: true, force: true }));

  it("is bundled into the processor's index.mjs with the handler factory, exporting handler", () => {
    expect(bundle).toContain(MARKER);
    expect(bundle).toContain('page-views');
    expect(bundle).toContain('createProcessorHandler');
    const exports = /export\s*\{([^}]*)\}/.exec(bundle)?.[1] ?? '';
    expect(
      exports.split(',').map((e) =>
        e
          .trim()
          .split(/\s+as\s+/)
          .pop(),
      ),
    ).toContain('handler');
    expect(processor.Handler).toBe('index.handler');
  });

  it('runs whatever EOS_TRANSFORM would say: the processor gets none', () => {
    expect(environmentOf(processor)).not.toHaveProperty('EOS_TRANSFORM');
  });

  it('gets a generated entry that depends only on the module and export, so its asset hash is stable', () => {
    const module = {
      file: FIXTURE_PATH,
      exportName: 'pageViews',
      usesGlueRegistry: false,
      glueRegistryNames: [],
      registrySecretArns: [],
      columns: [],
    };
    expect(writeProcessorEntry(module)).toBe(writeProcessorEntry({ ...module }));
    expect(processorEntrySource(module)).toContain(
      `import { pageViews as transform } from ${JSON.stringify(FIXTURE_PATH)}`,
    );
    expect(processorEntrySource({ ...module, exportName: 'default' })).toContain(
      `import transform from ${JSON.stringify(FIXTURE_PATH)}`,
    );
  });
});

describe('the transform setting', () => {
  it('keeps the stock processor and EOS_TRANSFORM for a built-in', () => {
    const { template } = synthesize({ transform: 'passthrough' });
    expect(environmentOf(processorProperties(template)).EOS_TRANSFORM).toBe('passthrough');
  });

  it("takes a module's default export when no export is named, from context as well", () => {
    const app = testApp({ ...BASE_PROPS, transform: './test/fixtures/infra/default-export.ts' });
    const stack = new ExactlyOncePipelineStack(app, 'FromContext');
    expect(pipelinePropsFromContext(stack).transform).toBe('./test/fixtures/infra/default-export.ts');
    expect(environmentOf(processorProperties(Template.fromStack(stack)))).not.toHaveProperty('EOS_TRANSFORM');
  });

  it('refuses a processorEntry next to a module transform (the generated entry is the processor)', () => {
    const attempt = () =>
      synthesize({
        transform: { entry: FIXTURE, exportName: 'pageViews' },
        processorEntry: 'functions/processor.ts',
      });
    expect(attempt).toThrow(/invalid setting processorEntry: cannot be combined with a module transform/);
  });

  it.each([
    [
      'a missing file, by its resolved path',
      { entry: 'test/fixtures/infra/no-such-transform.ts' },
      TransformModuleNotFoundError,
      `transform module not found: ${resolve('test/fixtures/infra/no-such-transform.ts')}`,
    ],
    [
      'a missing export, listing the exports',
      { entry: FIXTURE, exportName: 'pageView' },
      TransformExportMissingError,
      `transform module ${FIXTURE_PATH} has no export "pageView" (exports: PAGE_VIEWS_MARKER, notATransform, pageViews)`,
    ],
    [
      'no default export and several exports',
      { entry: FIXTURE },
      TransformExportMissingError,
      'no default export',
    ],
    [
      'an export that is not a defineTransform',
      { entry: FIXTURE, exportName: 'notATransform' },
      NotATransformError,
      `export "notATransform" of ${FIXTURE_PATH} is not a transform made by defineTransform (it is an object)`,
    ],
    [
      'an unknown built-in, listing the known ones',
      'ordres',
      UnknownTransformError,
      'known: orders, passthrough',
    ],
    [
      'a context path with a missing export',
      `${FIXTURE}#nope`,
      TransformExportMissingError,
      'has no export "nope"',
    ],
  ])('fails synth for %s', (_name, transform, type, message) => {
    const attempt = () => synthesize({ transform });
    expect(attempt).toThrow(type);
    expect(attempt).toThrow(message);
  });
});

describe("docs/deploy.md's own transform", () => {
  // Written as the docs show it, under test/fixtures (the package's own `msk-exactly-once-pipeline/transform`
  // export resolves from anywhere inside the repository, as it does from a user's project that installed it).
  const dir = join('test', 'fixtures', 'infra', `docs-example-${process.pid}`);
  const file = resolve(dir, 'page-views.ts');
  beforeAll(() => {
    const page = readFileSync('docs/deploy.md', 'utf8');
    const block = /For example `my-transforms\/page-views\.ts`:\n\n```ts\n([\s\S]*?)```/.exec(page)?.[1];
    if (!block) throw new Error('docs/deploy.md has no my-transforms/page-views.ts example');
    mkdirSync(dir, { recursive: true });
    writeFileSync(file, block);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('passes the synth checks under the export the docs name, and counts a view per user and day', async () => {
    expect(resolveTransform({ kind: 'module', entry: file, exportName: 'pageViews' })).toEqual({
      file,
      exportName: 'pageViews',
      usesGlueRegistry: false,
      glueRegistryNames: [],
      registrySecretArns: [],
      // Read at synth: the stack's EOS_OUTPUT_COLUMNS for Parquet output.
      columns: [
        { name: 'userId', type: 'string', nullable: false },
        { name: 'page', type: 'string', nullable: false },
        { name: 'at', type: 'timestamp', nullable: false },
      ],
    });
    const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    const definition = module.pageViews as {
      transform: (record: unknown) => { rows: unknown[]; state: unknown[] };
    };
    expect(isTransformDefinition(definition)).toBe(true);
    const at = Date.parse('2026-01-31T10:00:00Z');
    const result = definition.transform({
      topic: 'clicks',
      partition: 0,
      offset: 1,
      timestamp: at,
      key: null,
      value: { userId: 'u1', page: '/home', at },
      headers: {},
    });
    expect(result.rows).toEqual([{ userId: 'u1', page: '/home', at }]);
    expect(result.state).toEqual([
      { key: 'u1#2026-01-31', fields: { userId: 'u1', day: '2026-01-31' }, add: { views: 1 } },
    ]);
  });
});

describe('a transform decoding with an AWS Glue Schema Registry', () => {
  const glueStatements = (synthesized: ReturnType<typeof synthesize>) =>
    allStatements(synthesized.template).filter((s) => actionsOf(s).some((a) => a.startsWith('glue:')));
  let glue: ReturnType<typeof synthesize>;
  beforeAll(() => {
    glue = synthesize({ transform: { entry: 'test/fixtures/infra/glue-payments.ts' } }, { nag: true });
  });

  it('gives its processor GetSchemaVersion on the named registry only, and its entry the Glue lookup', () => {
    const statements = glueStatements(glue);
    expect(statements.map((s) => [s.Sid, actionsOf(s)])).toEqual([
      ['ReadGlueSchemaVersions', ['glue:GetSchemaVersion']],
    ]);
    const resources = JSON.stringify(glue.stack.resolve(statements[0]!.Resource));
    expect(resources).toContain(':registry/payments');
    expect(resources).toContain(':schema/payments/*');
    expect(resources).not.toContain('registry/*');
    const module = resolveTransform({
      kind: 'module',
      entry: 'test/fixtures/infra/glue-payments.ts',
      exportName: undefined,
    });
    expect(module).toMatchObject({ usesGlueRegistry: true, glueRegistryNames: ['payments'] });
    expect(processorEntrySource(module!)).toContain('glueGetSchemaVersion: glueSchemaVersionLookup()');
  });

  it('is cdk-nag clean, while a transform without Glue gets no Glue permission and no Glue client', () => {
    expect(unacknowledgedNagFindings(glue.stack)).toEqual([]);
    const plain = synthesize({ transform: { entry: FIXTURE, exportName: 'pageViews' } });
    expect(glueStatements(plain)).toEqual([]);
    const module = resolveTransform({ kind: 'module', entry: FIXTURE, exportName: 'pageViews' });
    expect(processorEntrySource(module!)).not.toContain('glue');
  });
});

describe('a transform whose Confluent registry credentials are in a Secrets Manager secret', () => {
  const SECRET = 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:registry/reader-AbCdEf';
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'eos-secret-transform-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  function moduleWith(registry: string): string {
    const file = join(dir, `payments-${Math.random().toString(36).slice(2)}.ts`);
    writeFileSync(
      file,
      [
        `import { defineTransform } from ${JSON.stringify(resolve('shared/transforms/api.ts'))};`,
        'export default defineTransform({',
        "  name: 'confluent-payments',",
        `  value: { format: 'avro', registry: ${registry} },`,
        "  schema: { id: 'string' },",
        '  transform: () => ({ rows: [] }),',
        '});',
      ].join('\n'),
    );
    return file;
  }

  it('is found by the synth-time probe, and only its entry gets the secret reader', () => {
    const withSecret = resolveTransform({
      kind: 'module',
      entry: moduleWith(
        `{ kind: 'confluent', url: 'https://registry.internal', basicAuthSecret: '${SECRET}' }`,
      ),
      exportName: undefined,
    });
    expect(withSecret).toMatchObject({ usesGlueRegistry: false, registrySecretArns: [SECRET] });
    const source = processorEntrySource(withSecret!);
    expect(source).toContain('registrySecret: registrySecretLookup()');
    expect(source).toContain('shared/decode/registry-secret.ts');

    const plain = resolveTransform({
      kind: 'module',
      entry: moduleWith(`{ kind: 'confluent', url: 'https://registry.internal', basicAuth: 'reader:pw' }`),
      exportName: undefined,
    });
    expect(plain).toMatchObject({ registrySecretArns: [] });
    expect(processorEntrySource(plain!)).not.toContain('registry-secret');
    expect(processorEntrySource(plain!)).not.toContain('registrySecret');
  });
});

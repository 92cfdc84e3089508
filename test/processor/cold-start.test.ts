/**
 * What the processor Lambda loads at cold start (`init_ms_processor`, `bench/cold-start.ts`): the stock processor
 * bundle, built as the stack builds it, statically reaches neither the Avro/Protobuf codecs (avro-js, protobufjs:
 * loaded by a dynamic import only for a transform that decodes those formats) nor the SDK's non-environment
 * credential providers, nor the Parquet writer or DuckDB (the coordinator's); and it still starts and runs. The
 * decoders without the codecs refuse Avro until they are loaded, and decode it after.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Metafile } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleHandler } from '../../scripts/bundle.mjs';
import { SchemaCodecsNotLoadedError } from '../../shared/decode/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { loadDecoders, toTransform } from '../../shared/transforms/adapter.ts';
import { defineTransform } from '../../shared/transforms/api.ts';
import { avroBytes, b64, fixture } from '../fixtures/decode/wire.ts';

const outdir = mkdtempSync(join(tmpdir(), 'eos-cold-start-'));
let metafile: Metafile;
let entryFile: string;

beforeAll(async () => {
  entryFile = await bundleHandler('functions/processor.ts', outdir, {
    onMetafile: (meta) => {
      metafile = meta;
    },
  });
}, 120_000);
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

/** The source files in the bundle's output files, split by whether init loads them (static imports from index.mjs). */
function inputsByLoading(meta: Metafile): { atInit: Set<string>; onDemand: Set<string> } {
  const outputs = meta.outputs;
  const index = Object.keys(outputs).find((file) => file.endsWith('/index.mjs'))!;
  const loaded = new Set<string>();
  const queue = [index];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (loaded.has(file)) continue;
    loaded.add(file);
    for (const imported of outputs[file]!.imports) {
      if (imported.kind === 'import-statement' && !imported.external) queue.push(imported.path);
    }
  }
  const atInit = new Set<string>();
  const onDemand = new Set<string>();
  for (const [file, output] of Object.entries(outputs)) {
    for (const input of Object.keys(output.inputs)) (loaded.has(file) ? atInit : onDemand).add(input);
  }
  return { atInit, onDemand };
}

const fromPackage = (inputs: Set<string>, name: string) =>
  [...inputs].some((input) => input.includes(`node_modules/${name}/`));

describe('the stock processor bundle at init', () => {
  it('does not load the Avro and Protobuf codecs: they are a chunk of their own', () => {
    const { atInit, onDemand } = inputsByLoading(metafile);
    for (const name of ['avro-js', 'protobufjs', 'long']) {
      expect(fromPackage(atInit, name), name).toBe(false);
      expect(fromPackage(onDemand, name), name).toBe(true);
    }
    expect(atInit.has('shared/decode/schema-codecs.ts')).toBe(false);
    expect(onDemand.has('shared/decode/schema-codecs.ts')).toBe(true);
  });

  it("does not load the SDK's credential providers other than the environment's", () => {
    const { atInit, onDemand } = inputsByLoading(metafile);
    for (const name of [
      '@aws-sdk/credential-provider-ini',
      '@aws-sdk/credential-provider-sso',
      '@aws-sdk/nested-clients',
    ]) {
      expect(fromPackage(atInit, name), name).toBe(false);
      expect(fromPackage(onDemand, name), name).toBe(true);
    }
  });

  it('carries neither the Parquet writer nor DuckDB, at init or on demand', () => {
    const { atInit, onDemand } = inputsByLoading(metafile);
    for (const name of ['hyparquet-writer', 'hyparquet', '@duckdb/node-api']) {
      expect(fromPackage(atInit, name) || fromPackage(onDemand, name), name).toBe(false);
    }
  });

  it('starts in a fresh Node.js process and exports the handler', () => {
    const out = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(entryFile)}); process.stdout.write(typeof m.handler);`,
      ],
      {
        env: {
          PATH: process.env.PATH ?? '',
          EOS_LEDGER_TABLE: 'ledger',
          EOS_BUCKET: 'bucket',
          AWS_REGION: 'us-east-1',
          AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        },
        encoding: 'utf8',
      },
    );
    expect(out).toBe('function');
  }, 30_000);
});

describe('decoders without the codecs (what the stock processor imports)', () => {
  const schema = fixture('payment.avsc');
  const payments = defineTransform<{ id: string }>({
    name: 'payments',
    value: { format: 'avro', schema },
    schema: { id: 'string' },
    transform: ({ value }) => (value === null ? new Error('tombstone') : { rows: [{ id: value.id }] }),
  });

  it('refuse an Avro transform until its codecs are loaded, then decode it', async () => {
    // This file never imports shared/decode/index.ts, which would install the codecs statically.
    expect(() => toTransform(payments)).toThrow(SchemaCodecsNotLoadedError);
    await loadDecoders(payments);
    const transform = toTransform(payments);
    const payment = { id: 'p-1', amountCents: 1250, currency: 'EUR', note: null };
    const rawValue = b64(avroBytes(schema, payment));
    const record: DecodedRecord = {
      topic: 'payments',
      partition: 0,
      offset: 0,
      timestamp: 0,
      key: null,
      value: null,
      valueIsUtf8: false,
      headers: {},
      rawKey: null,
      rawValue,
      rawHeaders: [],
    };
    await transform.prepare?.([record]);
    const result = transform.apply(record);
    expect(result).toMatchObject({ kind: 'ok', rows: [{ id: 'p-1' }] });
  });
});

/**
 * `eos redrive` with a transform that decodes through a schema registry looks schemas up as the processor does:
 * a Confluent registry over HTTP, Glue through GetSchemaVersion (the SDK's client, its API mocked: Glue cannot run
 * here). A registry that fails meanwhile is not a new reason to send a dead letter: the command fails with one
 * line and exit 3, nothing sent, and a run once the registry answers finds nothing to send. Real DynamoDB Local and
 * S3 server, the real processor and coordinator; the Confluent registry is a loopback HTTP server.
 */
import { GetSchemaVersionCommand, GlueClient } from '@aws-sdk/client-glue';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { eos } from '../support/eos.ts';
import {
  AVRO_SCHEMA,
  CONFLUENT_SCHEMA_ID,
  type DecoderKind,
  decoderKinds,
  GLUE_VERSION_ID,
  paymentsTransform,
  stageEvents,
} from './payments.ts';

const MODULE = new URL('./fixtures/payments-module.ts', import.meta.url).pathname;

let res: TestResources;
let registry: TestRegistry;
let confluent: DecoderKind;
let glue: DecoderKind;
beforeAll(async () => {
  res = await freshResources('rdr');
  registry = await startRegistry({ [CONFLUENT_SCHEMA_ID]: { schema: AVRO_SCHEMA } });
  // Read by the module `eos redrive --transform` loads.
  process.env.REDRIVE_TEST_REGISTRY_URL = registry.url;
  const kinds = decoderKinds(registry.url);
  confluent = kinds.find((kind) => kind.name === 'Avro with a Confluent registry')!;
  glue = kinds.find((kind) => kind.name === 'Avro with Glue')!;
});
afterAll(() => registry.close());
afterEach(() => {
  registry.mode = 'serve';
});

async function deadLetters(settings: Settings): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream: 'deadletter',
  })) {
    rows.push(`${file.topic}#${file.partition}@${(row.source as { offset: number }).offset}`);
  }
  return rows.sort();
}

const ORIGINAL = ['payments#0@0', 'payments#0@3', 'payments#0@6', 'payments#0@7'];

async function withDeadLetters(kind: DecoderKind): Promise<Settings> {
  const settings = settingsIn(res, 'rdr');
  await stageEvents(res.clients, settings, kind);
  await checkpoint(res, settings);
  expect(await deadLetters(settings)).toEqual(ORIGINAL);
  return settings;
}

function redriveArgs(settings: Settings, exportName: string): string[] {
  return [
    'redrive',
    '--table',
    settings.ledgerTable,
    '--bucket',
    settings.bucket,
    '--pipeline',
    settings.pipelineId,
    '--transform',
    `${MODULE}#${exportName}`,
  ];
}

describe('a registry that fails during a redrive is not a new reason', () => {
  it('the run fails before sending anything; once the registry answers, nothing is to send', async () => {
    const settings = await withDeadLetters(confluent);
    registry.mode = 'fail-500';
    await expect(
      redrive({
        settings,
        clients: res.clients,
        transform: paymentsTransform(confluent, { rejectNegative: true }),
      }),
    ).rejects.toThrow(/schema registry/);
    registry.mode = 'serve';
    const later = await redrive({
      settings,
      clients: res.clients,
      transform: paymentsTransform(confluent, { rejectNegative: true }),
    });
    expect(later.partitions.map((p) => [p.outcome, p.sent, p.unchanged])).toEqual([['nothing', 0, 4]]);
    await checkpoint(res, settings);
    expect(await deadLetters(settings)).toEqual(ORIGINAL);
  });

  it('eos redrive exits 3 with one line naming the registry, and prints no outcome', async () => {
    const settings = await withDeadLetters(confluent);
    registry.mode = 'fail-500';
    const failed = await eos(redriveArgs(settings, 'confluent'));
    expect(failed.code).toBe(3);
    expect(failed.out).toBe('');
    expect(failed.err).toMatch(/^error: [^\n]*schema registry[^\n]*\n$/);
    expect(failed.err).toContain(`${registry.url}/schemas/ids/${CONFLUENT_SCHEMA_ID}`);
    registry.mode = 'serve';
    const later = await eos(redriveArgs(settings, 'confluent'));
    expect(later).toMatchObject({ code: 0, err: '' });
    expect(later.out).toBe(
      'payments-0: nothing to redrive (4 fail again for the same reason: left dead-lettered)\n',
    );
  });
});

describe('eos redrive looks schemas up as the processor does', () => {
  const glueApi = mockClient(GlueClient);
  afterAll(() => glueApi.restore());

  it('Glue: schema versions come from GetSchemaVersion, so a run without a fix sends nothing', async () => {
    const settings = await withDeadLetters(glue);
    glueApi
      .on(GetSchemaVersionCommand, { SchemaVersionId: GLUE_VERSION_ID })
      .resolves({ SchemaDefinition: AVRO_SCHEMA, DataFormat: 'AVRO', SchemaVersionId: GLUE_VERSION_ID });
    const run = await eos(redriveArgs(settings, 'glue'));
    expect(run).toMatchObject({ code: 0, err: '' });
    expect(run.out).toBe(
      'payments-0: nothing to redrive (4 fail again for the same reason: left dead-lettered)\n',
    );
    expect(glueApi.commandCalls(GetSchemaVersionCommand)).toHaveLength(1);
    await checkpoint(res, settings);
    expect(await deadLetters(settings)).toEqual(ORIGINAL);
  });

  it('Glue refusing the operator (AccessDenied): exit 3 with one line, nothing sent; with access, nothing to send', async () => {
    const settings = await withDeadLetters(glue);
    glueApi.reset();
    glueApi.on(GetSchemaVersionCommand).rejects(
      Object.assign(new Error('User is not authorized to perform: glue:GetSchemaVersion'), {
        name: 'AccessDeniedException',
      }),
    );
    const refused = await eos(redriveArgs(settings, 'glue'));
    expect(refused.code).toBe(3);
    expect(refused.out).toBe('');
    expect(refused.err).toMatch(/^error: [^\n]*schema registry refused[^\n]*AccessDeniedException[^\n]*\n$/);
    await checkpoint(res, settings);
    expect(await deadLetters(settings)).toEqual(ORIGINAL);
    glueApi.reset();
    glueApi
      .on(GetSchemaVersionCommand, { SchemaVersionId: GLUE_VERSION_ID })
      .resolves({ SchemaDefinition: AVRO_SCHEMA, DataFormat: 'AVRO', SchemaVersionId: GLUE_VERSION_ID });
    const allowed = await eos(redriveArgs(settings, 'glue'));
    expect(allowed).toMatchObject({ code: 0, err: '' });
    expect(allowed.out).toBe(
      'payments-0: nothing to redrive (4 fail again for the same reason: left dead-lettered)\n',
    );
  });
});

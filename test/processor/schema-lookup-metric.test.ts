/**
 * A schema id that finds no schema is counted where an operator looks: the processor handler turns the decoders'
 * report into the `SchemaLookupMisses` metric and a warning naming the id and the registry's answer, while the
 * records naming it are dead-lettered. The registry is a loopback HTTP server answering as a Confluent registry.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Context } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { createProcessorHandler } from '../../functions/processor-factory.ts';
import { loadSchemaCodecs } from '../../shared/decode/decoders.ts';
import { METRIC } from '../../shared/observability/names.ts';
import { defineTransform } from '../../shared/transforms/api.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { lambdaContext } from '../support/lambda-context.ts';
import { stagedRows } from '../support/ledger.ts';
import { mskEventOf, mskRecord } from '../support/msk.ts';

let res: TestResources;
let registry: Server;
let url: string;
beforeAll(async () => {
  res = await freshResources('schema-miss');
  await loadSchemaCodecs();
  // Id 403 is refused, every other id is unknown.
  registry = createServer((request, response) => {
    const refused = request.url?.endsWith('/403');
    response.writeHead(refused ? 403 : 404, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ error_code: refused ? 40301 : 40403, message: 'no' }));
  });
  await new Promise<void>((resolve) => registry.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => registry.close(() => resolve())));

/** Confluent framing: magic 0, the schema id big-endian, then (here) one Avro byte. */
function framed(id: number): Buffer {
  const bytes = Buffer.alloc(6);
  bytes.writeUInt32BE(id, 1);
  return bytes;
}

describe('schema ids that find no schema', () => {
  let stdout: MockInstance<typeof process.stdout.write>;
  let stderr: MockInstance<typeof process.stderr.write>;
  afterEach(() => {
    stdout?.mockRestore();
    stderr?.mockRestore();
  });

  it('are counted in SchemaLookupMisses and named in a warning, their records dead-lettered', async () => {
    const settings = settingsIn(res, 'schema-miss', { idempotencyKey: 'none' });
    const transform = defineTransform({
      name: 'registry-values',
      value: { format: 'avro', registry: { kind: 'confluent', url } },
      schema: { n: 'long' },
      transform: ({ value }) => ({ rows: [{ n: Number(value) }] }),
    });
    const handler = createProcessorHandler({ transform, settings }) as unknown as (
      event: unknown,
      context: Context,
    ) => Promise<unknown>;
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const records = [7, 403, 7].map((id, offset) => ({
      ...mskRecord({ partition: 0, offset, value: '' }),
      value: framed(id).toString('base64'),
    }));
    await handler(mskEventOf({ 'orders-0': records }), lambdaContext('processor', 'miss-1'));
    const lines = [...stdout.mock.calls, ...stderr.mock.calls]
      .flatMap(([chunk]) => String(chunk).split('\n'))
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const blobs = lines.filter((line) => '_aws' in line);
    // Two distinct ids, each reported once (the second record naming 7 finds it in the negative cache).
    const counted = blobs.flatMap((blob) => [blob[METRIC.schemaLookupMisses] ?? []].flat() as number[]);
    expect(counted.reduce((sum, n) => sum + n, 0)).toBe(2);
    const warnings = lines.filter((line) => String(line.message).startsWith('schema id found no schema'));
    expect(warnings.map((w) => [w.id, w.outcome])).toEqual([
      [7, 'not-found'],
      [403, 'refused'],
    ]);
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => [r.stream, (r.row.source as { offset: number }).offset])).toEqual([
      ['deadletter', 0],
      ['deadletter', 1],
      ['deadletter', 2],
    ]);
  });
});

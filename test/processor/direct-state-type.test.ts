/**
 * At-least-once keyed state meets a field of the wrong type (L1, P6): a record that adds to a state field an
 * earlier record set as text is refused by DynamoDB on every retry. The direct path dead-letters exactly that record,
 * as exactly-once does, and applies the rest, so the partition goes on. Real DynamoDB Local and S3 server.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readFinalRows } from '../../shared/sink/verify.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { ledgerView } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('dstype');
});

/** `set`: sets `x` to text; `addx`: adds to `x` and `n`; `n`: adds to `n` only. One state key. */
const typing: Transform = {
  name: 'typing',
  apply(record) {
    const kind = Buffer.from(record.rawValue ?? '', 'base64').toString();
    const fields: Record<string, string> = kind === 'set' ? { x: 'text' } : {};
    const add: Record<string, number> = kind === 'addx' ? { x: 1, n: 1 } : kind === 'n' ? { n: 1 } : {};
    return { kind: 'ok', rows: [{ offset: record.offset }], state: [{ key: 'customer', fields, add }] };
  },
};

const spec = (offset: number, value: string): RecordSpec => ({ partition: 0, offset, value });

async function finalIds(settings: Settings): Promise<Record<string, string[]>> {
  const by: Record<string, string[]> = {};
  for (const { stream, row } of await readFinalRows({
    s3: res.clients.s3,
    bucket: res.bucket,
    pipeline: settings.pipelineId,
  })) {
    const source = row.source as { offset: number };
    by[stream] ??= [];
    by[stream].push(String(source.offset));
  }
  for (const ids of Object.values(by)) ids.sort();
  return by;
}

describe('at-least-once keyed state with an add to a field set as text', () => {
  it('dead-letters only the record that adds to the text field, applies the rest, and acknowledges the batch', async () => {
    const settings = settingsIn(res, 'dstype', {
      deliveryGuarantee: 'at-least-once',
      idempotencyKey: 'none',
    });
    const processor = createProcessor({ settings, clients: res.clients, transform: typing });
    const report = await processor.processEvent(mskEvent([spec(0, 'set'), spec(1, 'addx'), spec(2, 'n')]));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, deadLettered: 1 });
    expect(await finalIds(settings)).toEqual({ output: ['0', '2'], deadletter: ['1'] });
    const rows = await readFinalRows({
      s3: res.clients.s3,
      bucket: res.bucket,
      pipeline: settings.pipelineId,
    });
    expect(String(rows.find((r) => r.stream === 'deadletter')?.row.error)).toContain('is not a number');
    const state = (await ledgerView(res.clients, res.table, settings.pipelineId)).state.customer;
    expect(state).toMatchObject({ x: 'text', n: 1 });
  });
});

/**
 * Redrive reads committed dead letters from slices of merged final objects (`shared/sink/entry-bytes.ts`): a real
 * run commits dead letters into merged objects (`finalObjects: merged`, the coordinator's own promote), and the
 * redrive finds every dead letter in their slices, sends each fixed record once, and the result reads and verifies
 * as exactly-once.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createProcessor } from '../../shared/processor/processor.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted, readManifests } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rdm');
});

const orders = builtinTransform('orders');

/** Rejects every order whose offset ends in 7. */
const buggy: Transform = {
  name: 'orders-buggy',
  apply(record) {
    if (record.offset % 10 === 7) return { kind: 'poison', error: 'bug: offsets ending in 7 rejected' };
    return orders.apply(record);
  },
};

describe('redrive over slices of merged objects', () => {
  it('finds every dead letter in the slices and sends each fixed record once', async () => {
    const settings = settingsIn(res, 'rdm', { finalObjects: 'merged' });
    const source = { s3: res.clients.s3, bucket: settings.bucket, pipeline: settings.pipelineId };
    await createProcessor({ settings, clients: res.clients, transform: buggy }).processEvent(
      mskEvent([...orderRecords(0, 0, 20), ...orderRecords(1, 0, 20)]),
    );
    await checkpoint(res, settings);
    const listed = async () => {
      const files = [];
      for await (const manifest of readManifests(source)) files.push(...manifest.files);
      return files;
    };
    // Both partitions' dead letters are slices of one merged object.
    const dead = (await listed()).filter((file) => file.stream === 'deadletter');
    expect(dead.map((file) => file.sliceStart !== undefined)).toEqual([true, true]);
    expect(new Set(dead.map((file) => file.key)).size).toBe(1);

    const report = await redrive({ settings, clients: res.clients, transform: orders });
    expect(report.partitions.map((p) => [p.lane, p.partition, p.outcome, p.sent])).toEqual([
      ['orders', 0, 'redriven', 2],
      ['orders', 1, 'redriven', 2],
    ]);
    await checkpoint(res, settings);
    const output: string[] = [];
    for await (const { file, row } of readCommitted(source)) {
      const at = row.source as { partition: number; offset: number };
      output.push(`${file.topic}#${at.partition}@${at.offset}`);
    }
    const expected = [0, 1].flatMap((partition) =>
      Array.from({ length: 20 }, (_, offset) =>
        offset % 10 === 7 ? `orders~r1#${partition}@${offset}` : `orders#${partition}@${offset}`,
      ),
    );
    expect(output.sort()).toEqual(expected.sort());
    expect((await verifySink(source)).problems).toEqual([]);
    expect((await listed()).every((file) => file.sliceStart !== undefined)).toBe(true);
    // A second run finds every dead letter redriven (read from the slices again): nothing is sent.
    const again = await redrive({ settings, clients: res.clients, transform: orders });
    expect(again.partitions.map((p) => [p.outcome, p.sent])).toEqual([
      ['nothing', 0],
      ['nothing', 0],
    ]);
  });
});

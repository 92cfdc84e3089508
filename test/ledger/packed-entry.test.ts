/**
 * Inline staged entries packed into bytes (shared/ledger/packed-entry.ts) with the key template an entry shares
 * kept once in the fence (shared/ledger/inline-entries.ts): every entry unpacks to exactly what was staged, the
 * entries of the release before (a map of named fields) are still read, a value that does not unpack exactly is
 * rejected, and on the fence item a template is written once and never changed under the entries that share it.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import {
  inlineBytesIn,
  inlineItemsOf,
  packEntry,
  templateAttribute,
  templatesIn,
} from '../../shared/ledger/inline-entries.ts';
import { packEntryValue, templateOf, unpackEntryValue } from '../../shared/ledger/packed-entry.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

function entry(over: Partial<StagedFileEntry> = {}): StagedFileEntry {
  const base = {
    pipeline: 'orders-eos',
    stream: 'output' as const,
    topic: 'orders',
    partition: 7,
    firstOffset: 1_000,
    lastOffset: 1_499,
    attemptId: '9af82583-5022-492a-9ed1-3cf7535aaf57',
    gzip: true,
    ...over,
  };
  return {
    ...base,
    key:
      over.key ??
      stagedObjectKey(base.pipeline, { ...base, stream: base.stream }, `${base.attemptId}.0`, base.gzip),
    recordCount: 500,
    bytes: 15_129,
    sha256: 'ab'.repeat(32),
    md5: 'cd'.repeat(16),
    stagedAt: 1_796_553_718_317,
    ...over,
  };
}

/** The entry as a packed value holds it: without the MD5, which no reader uses. */
function withoutMd5(e: StagedFileEntry): StagedFileEntry {
  const { md5: _, ...rest } = e;
  return rest;
}

const placeOf = (e: StagedFileEntry, template?: string) => ({
  pipeline: e.pipeline,
  topic: e.topic,
  partition: e.partition,
  lastOffset: e.lastOffset,
  stream: e.stream,
  template,
});

describe('the packed value', () => {
  const cases: Array<[string, Partial<StagedFileEntry>]> = [
    ['a UUID attempt, gzip', {}],
    ['an attempt that is no UUID, no gzip', { attemptId: 'attempt-7', gzip: false }],
    ['offsets near the largest safe integer', { firstOffset: 2 ** 53 - 10, lastOffset: 2 ** 53 - 1 }],
    ['a one-record range at offset 0', { firstOffset: 0, lastOffset: 0 }],
    ['a dead-letter entry', { stream: 'deadletter' }],
  ];
  for (const [name, over] of cases) {
    it(`round-trips exactly but for the MD5, its template in the value or in the fence: ${name}`, () => {
      const e = entry(over);
      expect(unpackEntryValue(packEntryValue(e, false), placeOf(e))).toStrictEqual(withoutMd5(e));
      expect(unpackEntryValue(packEntryValue(e, true), placeOf(e, templateOf(e)))).toStrictEqual(
        withoutMd5(e),
      );
    });
  }

  it('takes about 75 bytes with the template in the fence, 145 with it, against 190 for the map of two releases before', () => {
    const e = entry();
    expect(packEntryValue(e, true).byteLength).toBeLessThanOrEqual(76);
    expect(packEntryValue(e, false).byteLength).toBeLessThanOrEqual(145);
    const name = `e:${e.lastOffset}:output`;
    expect(inlineBytesIn({ [name]: packEntryValue(e, true) })).toBeLessThanOrEqual(90);
  });

  it('reads a value of the release before, which holds the MD5 after the SHA-256 (format 1)', () => {
    const e = entry();
    const packed = Buffer.from(packEntryValue(e, true));
    const withMd5 = Buffer.concat([
      Buffer.from([1]),
      packed.subarray(1, packed.byteLength - 16),
      Buffer.from(e.md5 ?? '', 'hex'),
      packed.subarray(packed.byteLength - 16),
    ]);
    expect(unpackEntryValue(withMd5, placeOf(e, templateOf(e)))).toStrictEqual(e);
    // Format 2 bytes read as format 1 (or the reverse) are 16 bytes short (or long): no entry.
    expect(
      unpackEntryValue(Buffer.from([1, ...packed.subarray(1)]), placeOf(e, templateOf(e))),
    ).toBeUndefined();
    expect(
      unpackEntryValue(Buffer.from([2, ...withMd5.subarray(1)]), placeOf(e, templateOf(e))),
    ).toBeUndefined();
  });

  it('rejects what does not unpack exactly: a truncated or extended value, an unknown format or flag, a span past offset 0, a missing template', () => {
    const e = entry();
    const packed = Buffer.from(packEntryValue(e, false));
    const place = placeOf(e);
    expect(unpackEntryValue(packed.subarray(0, packed.byteLength - 1), place)).toBeUndefined();
    expect(unpackEntryValue(Buffer.concat([packed, Buffer.from([0])]), place)).toBeUndefined();
    expect(unpackEntryValue(Buffer.from([3, ...packed.subarray(1)]), place)).toBeUndefined();
    expect(unpackEntryValue(Buffer.from([2, 8, ...packed.subarray(2)]), place)).toBeUndefined();
    expect(unpackEntryValue(packed, { ...place, lastOffset: 10 })).toBeUndefined();
    expect(unpackEntryValue(packEntryValue(e, true), place)).toBeUndefined();
    expect(unpackEntryValue('packed', place)).toBeUndefined();
  });

  it('refuses to pack an entry the processor cannot have made', () => {
    expect(() => packEntryValue(entry({ sha256: 'zz'.repeat(32) }), false)).toThrow(/malformed/);
    expect(() => packEntryValue(entry({ firstOffset: 2_000 }), false)).toThrow(/malformed/);
  });

  it('reads an entry of the release before the packed format (a map of named fields)', () => {
    const e = entry();
    const map = {
      f: e.firstOffset,
      c: e.recordCount,
      b: e.bytes,
      h: Buffer.from(e.sha256, 'hex'),
      m: Buffer.from(e.md5 ?? '', 'hex'),
      g: e.gzip,
      a: e.attemptId,
      t: e.stagedAt,
      k: templateOf(e),
    };
    expect(unpackEntryValue(map, placeOf(e))).toEqual(e);
    expect(unpackEntryValue({ ...map, h: Buffer.alloc(31) }, placeOf(e))).toBeUndefined();
  });
});

describe('sharing the key template', () => {
  it('shares the template the fence has, creates it when the fence has none, and keeps another in the value', () => {
    const e = entry();
    const template = templateOf(e);
    expect(packEntry(e, {}).template).toEqual({ attribute: 'k:output', value: template, fresh: true });
    expect(packEntry(e, { output: template }).template).toEqual({
      attribute: 'k:output',
      value: template,
      fresh: false,
    });
    const other = packEntry(e, { output: `${template}.x` });
    expect(other.template).toBeUndefined();
    expect(unpackEntryValue(other.value, placeOf(e, `${template}.x`))).toStrictEqual(withoutMd5(e));
    // Not known (a fence state not read from the item): the template stays in the value.
    expect(packEntry(e, undefined).template).toBeUndefined();
  });

  it('keeps a key that is its own template (no placeholder matched) in the value: a template of one entry is never shared', () => {
    const e = entry({ key: 'elsewhere/object.ndjson' });
    expect(templateOf(e)).toBe(e.key);
    expect(packEntry(e, {}).template).toBeUndefined();
  });
});

describe('on the fence item', () => {
  let res: TestResources;
  beforeAll(async () => {
    res = await freshResources('packed');
  });
  const settingsFor = () => settingsIn(res, 'pk', { transform: 'passthrough', idempotencyKey: 'none' });

  it('entries staged inline share one template attribute, written once, and read back as staged', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    for (let batch = 0; batch < 4; batch++)
      await processor.processEvent(mskEvent(orderRecords(0, batch * 10, 10)));
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 0);
    const fence = (await ledgerItem(res, key))!;
    const templates = templatesIn(fence);
    expect(Object.keys(templates)).toEqual(['output']);
    const where = { pipeline: settings.pipelineId, topic: 'orders', partition: 0, fence: key };
    const inline = inlineItemsOf(fence, where, { above: -1, upTo: 1_000 });
    // The first staging is a transaction (entries as items); the three after it are inline.
    expect(inline.map((i) => i.kind)).toEqual(['entry', 'entry', 'entry']);
    for (const item of inline) {
      if (item.kind !== 'entry') continue;
      expect(item.entry.key).toMatch(new RegExp(`^${settings.pipelineId}/_inprogress/output/`));
      expect(fence[item.at.attribute]).toBeInstanceOf(Uint8Array);
      expect((fence[item.at.attribute] as Uint8Array).byteLength).toBeLessThanOrEqual(95);
    }
  });

  it('a fence whose template is not the one known fails the write as a moved fence, and the retry stages every record once', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent(orderRecords(1, 0, 10)));
    await processor.processEvent(mskEvent(orderRecords(1, 10, 10)));
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 1);
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    // Changed behind the container's back (no writer of this code does): the shared template no longer matches.
    await doc.send(
      new UpdateCommand({
        TableName: res.table,
        Key: key,
        UpdateExpression: 'SET #k = :k',
        ExpressionAttributeNames: { '#k': templateAttribute('output') },
        ExpressionAttributeValues: { ':k': 'elsewhere' },
      }),
    );
    const report = await processor.processEvent(mskEvent(orderRecords(1, 20, 10)));
    expect(report.partitions[0]?.stagedRows).toBe(10);
    const fence = (await ledgerItem(res, key))!;
    const where = { pipeline: settings.pipelineId, topic: 'orders', partition: 1, fence: key };
    const entries = inlineItemsOf(fence, where, { above: 19, upTo: 29 });
    expect(entries).toHaveLength(1);
    const [staged] = entries;
    expect(staged?.kind).toBe('entry');
    if (staged?.kind === 'entry') {
      expect(staged.entry.key).toMatch(new RegExp(`^${settings.pipelineId}/_inprogress/output/.*-0+29\\.`));
      // The template the fence holds was not changed under the entries that may share it: this one keeps its own.
      expect(fence[templateAttribute('output')]).toBe('elsewhere');
      // Its own template in the value: far more than an entry that shares the fence's (about 60 bytes).
      expect((fence[staged.at.attribute] as Uint8Array).byteLength).toBeGreaterThan(100);
    }
  });
});

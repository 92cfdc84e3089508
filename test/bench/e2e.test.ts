/**
 * The end-to-end benchmark (bench/e2e.ts) at a tiny size against the real local parts: the byte counter counts the
 * bytes of real PutObject/GetObject calls (checked against the objects in the bucket and the candidates promote
 * copied), visibility latencies come
 * from the manifest that covers each record, paced input appends every record; and the statistics it reports.
 */
import { createHash } from 'node:crypto';
import { CopyObjectCommand, GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import {
  E2E_DEFAULTS,
  type E2eConfig,
  measureEndToEnd,
  runEndToEnd,
  runVisibility,
  steadyRate,
  visibilityLatencies,
} from '../../bench/e2e.ts';
import { percentile, spreadOf } from '../../bench/stats.ts';
import { ByteCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { checkpointWorkPrefix, STAGED_COPY_DIR } from '../../shared/coordinator/work-objects.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { type ListedObject, listObjects } from '../../shared/sink/objects.ts';
import { freshResources } from '../support/aws.ts';

const TINY: E2eConfig = {
  ...E2E_DEFAULTS,
  records: 600,
  partitions: 2,
  batchSize: 50,
  checkpointIntervalMs: 200,
  pairs: 1,
  warmUpRecords: 100,
};

async function listed(bucket: string, prefix: string): Promise<ListedObject[]> {
  const clients = createAwsClients();
  try {
    const objects: ListedObject[] = [];
    for await (const object of listObjects(clients.s3, bucket, prefix)) objects.push(object);
    return objects;
  } finally {
    clients.s3.destroy();
    clients.dynamodb.destroy();
  }
}

async function bodyOf(bucket: string, key: string): Promise<Uint8Array> {
  const clients = createAwsClients();
  try {
    const got = await clients.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return await got.Body!.transformToByteArray();
  } finally {
    clients.s3.destroy();
    clients.dynamodb.destroy();
  }
}

describe('bench statistics', () => {
  it('percentile is the nearest rank: the smallest value with at least p % at or below it', () => {
    const hundred = Array.from({ length: 100 }, (_, i) => 100 - i); // 100..1, unsorted on purpose
    expect(percentile(hundred, 50)).toBe(50);
    expect(percentile(hundred, 99)).toBe(99);
    expect(percentile(hundred, 100)).toBe(100);
    expect(percentile(hundred, 0)).toBe(1);
    expect(percentile([7, 3, 5], 50)).toBe(5);
    expect(percentile([7, 3, 5], 99)).toBe(7);
    expect(percentile([4], 99)).toBe(4);
    expect(hundred[0]).toBe(100); // the input is not sorted in place
    expect(() => percentile([], 50)).toThrow(RangeError);
  });

  it('spreadOf gives the smallest, the median and the largest, rounded', () => {
    expect(spreadOf([3, 1, 2])).toEqual({ min: 1, median: 2, max: 3 });
    expect(spreadOf([4, 1, 2, 10])).toEqual({ min: 1, median: 3, max: 10 });
    expect(spreadOf([0.1234, 0.5678], 2)).toEqual({ min: 0.12, median: 0.35, max: 0.57 });
    expect(() => spreadOf([])).toThrow(RangeError);
  });

  it('steadyRate is the slope from the first point with the share out to the last point before the end', () => {
    // 1,000 records: 100 out at t=100 (10 %), 500 at 500, 900 at 900 (the end of the drain), 1,000 at 2,000.
    const timeline: Array<[number, number]> = [
      [100, 100],
      [500, 500],
      [900, 900],
      [2000, 1000],
    ];
    expect(steadyRate(timeline, 1000, 0, 900)).toEqual({
      fromMs: 100,
      toMs: 900,
      records: 800,
      recordsPerSecond: 1000,
    });
    expect(steadyRate(timeline, 1000, 0, 900, 0.5)?.fromMs).toBe(500);
    expect(steadyRate(timeline, 1000, 0, 400)).toBeUndefined(); // one point only
  });

  it('each record’s visibility latency is the commit time of the manifest whose cut covers it', () => {
    const manifest = (checkpointId: number, cut: number, previousCut?: number): Manifest =>
      ({
        checkpointId,
        cut: { 'orders#0': cut },
        previousCut: previousCut === undefined ? {} : { 'orders#0': previousCut },
      }) as unknown as Manifest;
    const manifests = [manifest(1, 2), manifest(2, 4, 2)];
    const commits = new Map([
      [1, 1000],
      [2, 2000],
    ]);
    const appended = new Map([[0, [100, 200, 300, 400, 500]]]);
    expect(visibilityLatencies(manifests, commits, appended)).toEqual([900, 800, 700, 1600, 1500]);
  });
});

describe('ByteCounter against real S3 calls', () => {
  it('counts PutObject and GetObject bodies as the bytes stored, and a server-side copy as none', async () => {
    const { clients, bucket } = await freshResources('bytes');
    const counter = new ByteCounter({ keepCalls: true }).attach(clients);
    const text = 'zürich ✓ '.repeat(50); // multibyte: bytes, not characters
    const binary = Buffer.alloc(4321, 7);
    await clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'a.txt', Body: text }));
    await clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'b.bin', Body: binary }));
    await clients.s3.send(
      new CopyObjectCommand({ Bucket: bucket, Key: 'c.bin', CopySource: `${bucket}/b.bin` }),
    );
    const got = await clients.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'c.bin' }));
    const body = await got.Body!.transformToByteArray();
    const sizes = new Map((await listed(bucket, '')).map((o) => [o.key, o.size]));
    expect(sizes.get('a.txt')).toBe(Buffer.byteLength(text));
    const snapshot = counter.snapshot();
    expect(snapshot.written).toBe(sizes.get('a.txt')! + sizes.get('b.bin')!);
    expect(snapshot.read).toBe(body.byteLength);
    expect(snapshot.read).toBe(sizes.get('c.bin'));
    expect(snapshot.byOperation).toEqual({ GetObject: 4321, PutObject: snapshot.written });
    expect(counter.calls().map((c) => `${c.operation} ${c.key}`)).toEqual([
      'PutObject a.txt',
      'PutObject b.bin',
      'GetObject c.bin',
    ]);
  });
});

describe('end-to-end benchmark on the local parts', { timeout: 180_000 }, () => {
  it('exactly-once: counted bytes are the bytes of the objects written and read; promote moves none', async () => {
    const { run, settings, probe } = await runEndToEnd('exactly-once', TINY, TINY.records, 'test');
    expect(run.violations).toEqual([]);
    expect(run.committed).toBe(TINY.records);
    const pipeline = settings.pipelineId;
    const coordinator = probe.coordinator.calls();
    // No final object passes through Lambda: each is a server-side copy of a candidate prepare wrote, byte for byte.
    const finals = await listed(settings.bucket, finalPrefix(pipeline));
    expect(finals.length).toBeGreaterThan(0);
    expect(coordinator.filter((c) => c.key.startsWith(finalPrefix(pipeline)))).toEqual([]);
    expect(run.attribution.finalWritten).toBe(0);
    expect(run.attribution.promoteRead).toBe(0);
    const candidates = new Map(
      coordinator
        .filter((c) => c.operation === 'PutObject' && /\/candidate-[0-9a-f]{64}$/.test(c.key))
        .map((c) => [c.key.slice(c.key.lastIndexOf('candidate-') + 'candidate-'.length), c.bytes]),
    );
    for (const final of finals) {
      const body = await bodyOf(settings.bucket, final.key);
      expect(candidates.get(createHash('sha256').update(body).digest('hex'))).toBe(final.size);
    }
    expect(run.attribution.candidateWritten).toBe(
      [...candidates.values()].reduce((sum, bytes) => sum + bytes, 0),
    );
    expect(run.attribution.candidateWritten).toBe(finals.reduce((sum, o) => sum + o.size, 0));
    // Prepare reads each staged object once, whole (NDJSON: no second read), and nothing else of the processors'.
    const staged = new Map(probe.processor.calls().map((c) => [c.key, c.bytes]));
    const stagedReads = coordinator.filter((c) => c.operation === 'GetObject' && staged.has(c.key));
    expect(new Set(stagedReads.map((c) => c.key)).size).toBe(stagedReads.length);
    for (const read of stagedReads) expect(read.bytes).toBe(staged.get(read.key));
    expect(run.attribution.prepareStagedRead).toBe(run.attribution.stagedWritten);
    expect(coordinator.some((c) => c.key.includes(`/${STAGED_COPY_DIR}/`))).toBe(false);
    expect(coordinator.every((c) => !c.key.startsWith(checkpointWorkPrefix(pipeline)) || c.bytes > 0)).toBe(
      true,
    );
    // Every counted byte is attributed, none to an unexpected key.
    expect(Object.values(run.attribution).reduce((sum, bytes) => sum + bytes, 0)).toBe(run.bytes.total);
    expect(run.attribution.other).toBe(0);
    expect(run.objects.finalObjects).toBe(finals.length);
    expect(run.objects.stagedObjects).toBe(staged.size);
    expect(run.checkpointsCommitted).toBeGreaterThan(0);
    expect(Object.keys(run.steps.stepMs)).toEqual(
      expect.arrayContaining(['begin', 'prepare', 'promote', 'commit']),
    );
    expect(run.wholeMs).toBeGreaterThanOrEqual(run.drainMs);
  });

  it('at-least-once: the processor’s counted bytes are the final objects in the bucket', async () => {
    const { run, settings } = await runEndToEnd('at-least-once', TINY, TINY.records, 'test');
    expect(run.committed).toBe(TINY.records);
    const finals = await listed(settings.bucket, finalPrefix(settings.pipelineId));
    expect(run.attribution.directFinalWritten).toBe(finals.reduce((sum, o) => sum + o.size, 0));
    expect(run.bytes.coordinator.read + run.bytes.coordinator.written).toBe(0);
    // Nothing is staged, so no checkpoint runs (the stack schedules none either): the coordinator makes no call.
    expect(run.calls.coordinator).toEqual({});
    expect(run.checkpointsCommitted).toBe(0);
    expect(run.bytes.total).toBe(run.attribution.directFinalWritten);
    expect(run.tailMs).toBe(0);
  });

  it('paced input appends every record, and each latency comes from the manifest that covers it', async () => {
    const records = 240;
    const rate = 200;
    const started = Date.now();
    const run = await runVisibility(100, records, rate, TINY);
    const elapsed = Date.now() - started;
    const { probe, manifests } = run;
    // Every record appended once, at the pace: the last append about (n − 1) / rate after the first.
    const times = [...probe.appended.values()].flat();
    expect(times.filter((t) => t !== undefined)).toHaveLength(records);
    const appendSpan = Math.max(...times) - Math.min(...times);
    expect(appendSpan).toBeGreaterThanOrEqual(((records - 1) / rate) * 1000 - 20);
    expect(appendSpan).toBeLessThan(((records - 1) / rate) * 1000 + 1000);
    // Every record measured, each latency positive and within the run.
    expect(run.latencies).toHaveLength(records);
    const lastCommit = Math.max(...probe.commits.values());
    for (const latency of run.latencies) {
      expect(latency).toBeGreaterThan(0);
      expect(latency).toBeLessThanOrEqual(lastCommit - Math.min(...times));
      expect(latency).toBeLessThan(elapsed);
    }
    // Independently: each record's covering manifest is the first (by checkpoint) whose cut reaches its offset,
    // and that manifest lists a file holding the record.
    const expected: number[] = [];
    for (const [partition, offsets] of probe.appended) {
      offsets.forEach((appendedAt, offset) => {
        const covering = manifests.find((m) => (m.cut[`orders#${partition}`] ?? -1) >= offset)!;
        expect(covering).toBeDefined();
        expect(
          covering.files.some(
            (f) => f.partition === partition && f.firstOffset <= offset && offset <= f.lastOffset,
          ),
        ).toBe(true);
        expect(probe.commits.get(covering.checkpointId)).toBeDefined();
        expected.push(probe.commits.get(covering.checkpointId)! - appendedAt);
      });
    }
    const sort = (values: number[]) => [...values].sort((a, b) => a - b);
    expect(sort(run.latencies)).toEqual(sort(expected));
    expect(run.checkpointsCommitted).toBeGreaterThan(1);
  });

  it('measureEndToEnd: interleaved rounds, exactly-once moves more bytes through Lambda than at-least-once', async () => {
    const result = await measureEndToEnd({ ...TINY, records: 400, warmUpRecords: 50 });
    expect(result.runs.map((r) => `${r.mode}/${r.checkpoints}`).sort()).toEqual([
      'at-least-once/scheduled',
      'exactly-once/deferred',
      'exactly-once/scheduled',
    ]);
    for (const run of result.runs) expect(run.committed).toBe(400);
    // Staged write + prepare's read + the candidate's write, each about a direct write, plus plans and manifests;
    // no second read and no write of the final objects through Lambda.
    const eo = result.exactlyOnce.bytesPerRecordByKind;
    const threeTimes = eo.stagedWritten + eo.prepareStagedRead + eo.candidateWritten;
    const direct = result.atLeastOnce.bytesPerRecord.median;
    expect(threeTimes / direct).toBeGreaterThan(2.7);
    expect(threeTimes / direct).toBeLessThan(3.3);
    expect(eo.promoteRead + eo.finalWritten + eo.other).toBe(0);
    // At this tiny size plans and manifests weigh as much as the data; the ratio counts them too.
    const plansAndManifests = eo.workWritten + eo.workRead + eo.manifestWritten;
    expect(plansAndManifests).toBeGreaterThan(0);
    expect(result.bytesRatio.median).toBeCloseTo((threeTimes + plansAndManifests) / direct, 0);
    // The processors write the same rows in both modes (staged or final): about the same bytes.
    const written =
      result.exactlyOnce.bytesPerRecordByKind.stagedWritten /
      result.atLeastOnce.bytesPerRecordByKind.directFinalWritten;
    expect(written).toBeGreaterThan(0.9);
    expect(written).toBeLessThan(1.1);
    expect(result.wholeRatio.median).toBeGreaterThan(0);
  });
});

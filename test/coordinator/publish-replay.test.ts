/**
 * A replay switch published to the Iceberg table (C8): after each checkpoint the table, read back by icebird (a
 * reader nobody here wrote), holds exactly the rows the committed reader shows, as a multiset, through a real
 * replay (plan, the generation delivered by the processor in replay mode and committed, the switch checkpoint),
 * appends after it, and a second switch overlapping the first. The live files straddle the ranges' edges (rows
 * deleted by position) and the second range covers the first (the first generation's files removed whole). Real DynamoDB Local and S3 server; the
 * coordinator runs its real steps through the local state machine.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import {
  commitCheckpoint,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
  summaryOf,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubrp');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** Manifests read by the last {@link commitAndPublish}'s publish. */
let manifestsRead: number[] = [];

/** Commits the next checkpoint and publishes it; its id. */
async function commitAndPublish(s: ReplaySetup): Promise<number> {
  await commitCheckpoint(s);
  const id = (await s.parts.snapshots.readMark()).upTo + 1;
  manifestsRead = [];
  const counted = {
    ...s.parts,
    manifests: {
      read: (checkpointId: number) => {
        manifestsRead.push(checkpointId);
        return s.parts.manifests.read(checkpointId);
      },
    },
  };
  const published = await publishCheckpoint(counted, id);
  expect(published.publishedUpTo).toBe(id);
  return id;
}

describe('a replay switch published to the Iceberg table', { timeout: 120_000 }, () => {
  it("shows, after every checkpoint, exactly the committed reader's rows: through a switch, appends and an overlapping second switch", async () => {
    const s = replaySetup(res, 'pubrp');
    const input = records(0, 20);
    // One live file per partition: offsets 0..19.
    await deliver(s, input);
    expect(await commitAndPublish(s)).toBe(1);
    const before = await expectTableFollows(s, 'the live output');
    expect(before.filter((row) => row.endsWith(':v1'))).toHaveLength(40);

    // Generation 1 over offsets 3..14, delivered in files of 4 offsets and committed before its switch.
    await plan(res, s.settings, 3, 14);
    await deliver(s, input, { generation: 1, size: 4 });
    expect(await commitAndPublish(s)).toBe(2);
    // No switch yet: the publish reads its own manifest only.
    expect(manifestsRead).toEqual([2]);
    expect(await expectTableFollows(s, 'a generation staged, not switched')).toEqual(before);
    expect((await summaryOf(s, 2))?.operation).toBe('append');

    await switchTo(res, s.settings, 1);
    expect(await commitAndPublish(s)).toBe(3);
    // The switch reads the log up to it; its record lists it for the publishes after it.
    expect([...new Set(manifestsRead)].sort()).toEqual([1, 2, 3]);
    expect((await s.parts.snapshots.read(3))?.switches).toEqual([3]);
    const switched = await expectTableFollows(s, 'after the switch to generation 1');
    expect(switched.filter((row) => row.endsWith(':g1'))).toHaveLength(24);
    const summary = await summaryOf(s, 3);
    expect(summary).toMatchObject({
      operation: 'overwrite',
      'eos.pipeline-id': s.settings.pipelineId,
      'eos.checkpoint-id': '3',
      // Generation 1's file of each partition added; 12 rows of each live file deleted by position.
      'added-data-files': '2',
      'deleted-data-files': '0',
      'added-position-delete-files': '2',
      'added-position-deletes': '24',
    });
    expect(summary?.['eos.lanes']).toBe('orders~g1');

    // Appends after the switch: offsets 20..24 of the live output.
    await deliver(s, records(20, 5));
    expect(await commitAndPublish(s)).toBe(4);
    expect([...new Set(manifestsRead)].sort()).toEqual([3, 4]);
    expect((await s.parts.snapshots.readMark()).snapshot?.switches).toEqual([3]);
    await expectTableFollows(s, 'an append after the switch');
    expect((await summaryOf(s, 4))?.operation).toBe('append');

    // Generation 2 over 3..17: it hides generation 1's files whole and rows 15..17 of the live files.
    await plan(res, s.settings, 3, 17);
    await deliver(s, records(0, 25), { generation: 2, size: 3 });
    await switchTo(res, s.settings, 2);
    expect(await commitAndPublish(s)).toBe(5);
    expect((await s.parts.snapshots.read(5))?.switches).toEqual([3, 5]);
    const second = await expectTableFollows(s, 'after the overlapping switch to generation 2');
    expect(second.filter((row) => row.endsWith(':g2'))).toHaveLength(30);
    expect(second.filter((row) => row.endsWith(':g1'))).toHaveLength(0);
    expect(await summaryOf(s, 5)).toMatchObject({
      operation: 'overwrite',
      'added-data-files': '2',
      'deleted-data-files': '2',
      'deleted-records': '24',
      'added-position-deletes': '6',
    });
    expect(s.errors.filter((error) => !error.includes('left out'))).toEqual([]);

    // Published again: nothing is committed twice.
    const snapshots = (await s.catalog.load())?.metadata.snapshots.length;
    await publishCheckpoint(s.parts, 5);
    expect((await s.catalog.load())?.metadata.snapshots.length).toBe(snapshots);
    await expectTableFollows(s, 'a publish of a published switch');
  });
});

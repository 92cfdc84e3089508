/**
 * The table audit over replay switches (`eos verify --iceberg-table`): a table that followed a switch and a second
 * overlapping one passes, every file the readers show rows of live once, added by the checkpoint it entered with,
 * and no row the readers hide visible; a table whose position deletes were dropped by another writer shows rows
 * the readers hide, each file said in one line. Against DynamoDB Local and the local S3 server; the replay runs
 * through the processor in replay mode and the local state machine.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { commitOnHead } from '../support/publish.ts';
import {
  auditReplayTable as audit,
  commitCheckpoint,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
  tableRows,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('auditrp');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** Live offsets 0..19 (checkpoint 1), generation 1 over 3..14 switched (2), generation 2 over 3..17 (3). */
async function twoSwitches(): Promise<ReplaySetup> {
  const s = replaySetup(res, 'auditrp');
  await deliver(s, records(0, 20));
  await commitCheckpoint(s);
  await plan(res, s.settings, 3, 14);
  await deliver(s, records(0, 20), { generation: 1, size: 4 });
  await switchTo(res, s.settings, 1);
  await commitCheckpoint(s);
  await plan(res, s.settings, 3, 17);
  await deliver(s, records(0, 20), { generation: 2, size: 4 });
  await switchTo(res, s.settings, 2);
  await commitCheckpoint(s);
  await publishCheckpoint(s.parts, 3);
  await expectTableFollows(s, 'two switches published');
  return s;
}

describe('the table audit over replay switches', { timeout: 120_000 }, () => {
  it('passes a table that followed a switch and a second overlapping one', async () => {
    const s = await twoSwitches();
    expect(await audit(s)).toEqual({
      ok: true,
      location: s.catalog.location,
      publishedCheckpoint: 3,
      checkpoints: 3,
      snapshots: 3,
      // The live file and generation 2's of each partition; generation 1's are hidden whole.
      committedFiles: 4,
      liveFiles: 4,
      violations: [],
      notes: [],
    });
  });

  it("reports each file whose hidden rows are visible once another writer dropped the table's position deletes", async () => {
    const s = await twoSwitches();
    await commitOnHead(s.catalog, res.clients.s3, 7_300_000_000_000_000n, 'delete', (manifests) =>
      manifests.filter((manifest) => manifest.content === 0),
    );
    // Each live file shows its 15 hidden rows again (offsets 3..17).
    expect(await tableRows(s)).toHaveLength(40 + 30);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    const liveKeys = ((await s.parts.manifests.read(1))?.files ?? [])
      .filter((file) => file.stream === 'output')
      .map((file) => file.key)
      .sort();
    expect([...result.violations].sort()).toEqual(
      liveKeys.map(
        (key) =>
          `${key}: 15 row(s) the readers hide are visible in the table (s3://${s.settings.bucket}/${key})`,
      ),
    );
  });
});

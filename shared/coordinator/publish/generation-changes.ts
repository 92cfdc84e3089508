/**
 * What checkpoint K's snapshot changes so that, once it is committed, the table shows exactly the rows the
 * committed reader shows after K (C8): the readers' rule (`sink/generations.ts`, a {@link GenerationView} of the
 * manifests in log order, each listed file's shown spans) applied to every data file of the manifest log.
 *
 * With the view of manifests 1..K-1 ("before") and of 1..K ("after"), for each output data file F of manifests
 * 1..K (every lane: the live output, replay generations, redrive rounds):
 * - F is in the table before K when it is not K's own and the view before shows some of its rows; publishing
 *   each checkpoint by this rule keeps that so, with position deletes for the rows that view hides.
 * - After K shows none of F: if it was in, its entry is removed (a DELETED manifest entry); else it stays out.
 * - After K shows some of F and it was not in (K's own file, or a generation's file from an earlier manifest that
 *   K switches to): it is added, with position deletes for the rows after K hides.
 * - It was in and K hides rows of it the view before showed: position deletes for those rows.
 * Without a switch in manifests 1..K every file is shown whole or not at all, and the snapshot is the plain
 * append of K's shown files (no parent is read).
 *
 * Position deletes rather than copy-on-write: a final object straddling a range's edge keeps its rows where they
 * are (C7: final objects never change, and the table names them in place), the publish step writes only small
 * files under the table's prefix, and readers that follow Iceberg v2 (icebird, Athena) apply them. The positions
 * are read from the file's lineage (`source.offset` of each row, in file order), as the committed reader judges
 * each row.
 *
 * The parent's live files are asked on each attempt: F must be live in the parent for its rows to be removed or
 * deleted. A file the log says is in but the parent does not hold has been rewritten by another writer (a
 * compaction), and its rows are in a file the log cannot attribute (rows carry topic, partition and offset, not
 * the epoch lane or generation): the switch cannot be applied to them, and {@link TableSwitchUnattributedError}
 * stops the publish rather than commit a table that shows rows the readers hide.
 *
 * Reading the log: the ledger's record of each published checkpoint lists the checkpoints up to it that switch
 * (`TableSnapshot.switches`), so a checkpoint that does not switch reads only those manifests (none, for a
 * pipeline never replayed). A switching checkpoint reads every manifest up to it, once per publish (the `log`
 * map), as its generation's files can lie in any of them; so does a publish after a record from before the list
 * was kept.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { DataFile } from '../../iceberg/manifest-file.ts';
import type { ChangesOf, SnapshotChanges } from '../../iceberg/overwrite.ts';
import type { PositionDelete } from '../../iceberg/position-deletes.ts';
import { bucketByteSource, readEntryBytes } from '../../sink/entry-bytes.ts';
import { GenerationView, rowOffset } from '../../sink/generations.ts';
import type { Manifest, ManifestFile } from '../../sink/manifest.ts';
import type { ManifestStore } from '../../sink/manifest-store.ts';
import { decodeParquetRows } from '../../sink/parquet-read.ts';
import { checkpointDataFiles, type DataFileLayout } from './data-files.ts';

/**
 * A switch hides rows of a file the table no longer holds as published (a maintenance rewrite holds them): the
 * table cannot follow it, and nothing is committed.
 */
export class TableSwitchUnattributedError extends PipelineError {}

/** A committed manifest is missing from the log while a later one is published. */
export class PublishLogError extends PipelineError {}

export interface ChangeParts {
  readonly pipelineId: string;
  readonly bucket: string;
  readonly s3: S3Client;
  readonly manifests: Pick<ManifestStore, 'read'>;
  /** The manifests read so far by this publish (manifests never change once committed). */
  readonly log: Map<number, Manifest>;
}

/** A data file of the log with the manifest entry it came from. */
interface LogFile {
  readonly checkpointId: number;
  readonly dataFile: DataFile;
  readonly listed: ManifestFile;
}

export interface CheckpointChanges {
  /** The data files the snapshot adds (the same whatever the parent). */
  readonly dataFiles: DataFile[];
  /** The lanes of the files added, sorted. */
  readonly lanes: string[];
  /** Output objects left out, with why. */
  readonly left: readonly { readonly key: string; readonly reason: string }[];
  /** The changes against a parent when the snapshot removes or deletes rows; undefined: a plain append. */
  readonly changes?: ChangesOf;
  /** The checkpoints up to this one that switch, ascending (what the ledger's record of it keeps). */
  readonly switches: number[];
}

async function manifestOf(parts: ChangeParts, id: number): Promise<Manifest> {
  const cached = parts.log.get(id);
  if (cached) return cached;
  const manifest = await parts.manifests.read(id);
  if (!manifest) {
    throw new PublishLogError(
      `the manifest of committed checkpoint ${id} is missing: the switches cannot be read`,
    );
  }
  parts.log.set(id, manifest);
  return manifest;
}

type Spans = ReadonlyArray<readonly [number, number]>;

/** The offsets of [first, last] outside `shown`, as inclusive intervals. */
function complement(first: number, last: number, shown: Spans): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let next = first;
  for (const [from, to] of shown) {
    if (from > next) out.push([next, from - 1]);
    next = Math.max(next, to + 1);
  }
  if (next <= last) out.push([next, last]);
  return out;
}

/** The offsets shown by `before` and not by `after`. */
function newlyHidden(first: number, last: number, before: Spans, after: Spans): Array<[number, number]> {
  const hiddenAfter = complement(first, last, after);
  const out: Array<[number, number]> = [];
  for (const [a, b] of before) {
    for (const [c, d] of hiddenAfter) {
      const [from, to] = [Math.max(a, c), Math.min(b, d)];
      if (from <= to) out.push([from, to]);
    }
  }
  return out;
}

/** The positions of `file`'s rows whose offsets lie in `hidden`, read from the file's lineage. */
async function positionsOf(parts: ChangeParts, file: LogFile, hidden: Spans): Promise<PositionDelete> {
  // Through the entry's reader: a data file is a whole Parquet object (`data-files.ts` takes no slice).
  const body = await readEntryBytes(bucketByteSource(parts.s3, parts.bucket), file.listed);
  if (!body) throw new PublishLogError(`the committed output object ${file.listed.key} is missing`);
  // The lineage column alone: a final object can hold 250,000 rows of every column.
  const rows = await decodeParquetRows(body, ['source']);
  const positions: number[] = [];
  rows.forEach((row, position) => {
    const offset = rowOffset(row);
    if (offset !== undefined && hidden.some(([from, to]) => offset >= from && offset <= to)) {
      positions.push(position);
    }
  });
  return { dataFile: file.dataFile, positions };
}

/** The ids 1..`last`. */
const upTo = (last: number) => Array.from({ length: last }, (_, index) => index + 1);

/**
 * The manifests the views need: K's, and the switches before it (`known`, the ledger's list; undefined: read the
 * whole log to find them); every manifest up to K when K switches (its generations' files can be in any of them).
 */
async function manifestsFor(
  parts: ChangeParts,
  checkpointId: number,
  known: readonly number[] | undefined,
): Promise<{ manifests: Manifest[]; switches: number[]; whole: boolean }> {
  const own = await manifestOf(parts, checkpointId);
  const switchesHere = (own.generations ?? []).length > 0;
  const read = (ids: readonly number[]) => mapLimit(ids, 16, (id) => manifestOf(parts, id));
  if (known === undefined || switchesHere) {
    const manifests = await read(upTo(checkpointId));
    const switches = manifests.filter((m) => (m.generations ?? []).length > 0).map((m) => m.checkpointId);
    return { manifests, switches, whole: true };
  }
  const before = known.filter((id) => id < checkpointId);
  return { manifests: [...(await read(before)), own], switches: before, whole: false };
}

/**
 * What publishing checkpoint `checkpointId` changes in the table (see the module comment). `known`: the
 * checkpoints before it that switch (the ledger's record of the checkpoint before it; undefined: not known).
 */
export async function checkpointChanges(
  parts: ChangeParts,
  checkpointId: number,
  layout: DataFileLayout,
  known?: readonly number[],
): Promise<CheckpointChanges> {
  const { manifests, switches, whole } = await manifestsFor(parts, checkpointId, known);
  const [before, after] = [new GenerationView(), new GenerationView()];
  for (const manifest of manifests) {
    if (manifest.checkpointId < checkpointId) before.apply(manifest);
    after.apply(manifest);
  }
  const own = checkpointDataFiles(manifests.at(-1) as Manifest, parts.bucket, layout);
  const left = [...own.left];
  const files: LogFile[] = own.listed.map((listed, index) => ({
    checkpointId,
    listed,
    dataFile: own.dataFiles[index] as DataFile,
  }));
  const switchesHere = switches.includes(checkpointId);
  if (switchesHere && whole) {
    for (const manifest of manifests.slice(0, -1)) {
      const taken = checkpointDataFiles(manifest, parts.bucket, layout);
      taken.listed.forEach((listed, index) => {
        files.push({
          checkpointId: manifest.checkpointId,
          listed,
          dataFile: taken.dataFiles[index] as DataFile,
        });
      });
    }
  }
  const plan = planOf(files, checkpointId, before, after);
  for (const file of plan.outOfView) {
    left.push({
      key: file.listed.key,
      reason: 'rows no committed manifest shows (a generation not switched to)',
    });
  }
  const lanes = [...new Set(plan.added.map((file) => file.listed.topic))].sort();
  const dataFiles = plan.added.map((file) => file.dataFile);
  if (!switchesHere && plan.hiddenIn.length === 0) return { dataFiles, lanes, left, switches };
  return {
    dataFiles,
    lanes,
    left,
    switches,
    changes: (live) => changesOn(parts, checkpointId, plan, live, switchesHere),
  };
}

/** What the views say of each file, before any parent is looked at. */
interface Plan {
  readonly added: LogFile[];
  /** Added files with rows after K hides. */
  readonly hiddenIn: { file: LogFile; hidden: Spans }[];
  /** Files in the table before K that K hides whole. */
  readonly removed: LogFile[];
  /** Files in the table before K that K hides rows of. */
  readonly newlyHidden: { file: LogFile; hidden: Spans }[];
  /** K's own files no view shows. */
  readonly outOfView: LogFile[];
  /** Files not in the table before K (for the check that the parent does not hold them). */
  readonly notIn: LogFile[];
}

function planOf(
  files: readonly LogFile[],
  checkpointId: number,
  before: GenerationView,
  after: GenerationView,
): Plan {
  const plan: Plan = { added: [], hiddenIn: [], removed: [], newlyHidden: [], outOfView: [], notIn: [] };
  for (const file of files) {
    const { firstOffset: first, lastOffset: last } = file.listed;
    const own = file.checkpointId === checkpointId;
    const shownBefore = own ? [] : before.shownSpans(file.listed);
    const shownAfter = after.shownSpans(file.listed);
    const wasIn = shownBefore.length > 0;
    if (!wasIn) plan.notIn.push(file);
    if (shownAfter.length === 0) {
      if (wasIn) plan.removed.push(file);
      else if (own) plan.outOfView.push(file);
      continue;
    }
    if (!wasIn) {
      plan.added.push(file);
      const hidden = complement(first, last, shownAfter);
      if (hidden.length > 0) plan.hiddenIn.push({ file, hidden });
      continue;
    }
    const hidden = newlyHidden(first, last, shownBefore, shownAfter);
    if (hidden.length > 0) plan.newlyHidden.push({ file, hidden });
  }
  return plan;
}

function unattributed(checkpointId: number, file: LogFile, what: string): TableSwitchUnattributedError {
  return new TableSwitchUnattributedError(
    `checkpoint ${checkpointId} ${what} of ${file.listed.key} (checkpoint ${file.checkpointId}), which the table no longer holds as published (another writer rewrote it): the table cannot follow the switch; nothing is committed`,
  );
}

/** The plan against a parent holding `live` (see the module comment). */
async function changesOn(
  parts: ChangeParts,
  checkpointId: number,
  plan: Plan,
  live: ReadonlyMap<string, readonly number[]>,
  switches: boolean,
): Promise<SnapshotChanges> {
  for (const file of plan.notIn) {
    if (live.has(file.dataFile.path)) {
      throw new TableSwitchUnattributedError(
        `checkpoint ${checkpointId}: the table holds ${file.listed.key}, which no checkpoint before it shows: it does not hold what the manifest log says is published; nothing is committed`,
      );
    }
  }
  for (const file of plan.removed) {
    if (!live.has(file.dataFile.path)) throw unattributed(checkpointId, file, 'hides every row');
  }
  for (const { file } of plan.newlyHidden) {
    if (!live.has(file.dataFile.path)) throw unattributed(checkpointId, file, 'hides rows');
  }
  const deletes = [...plan.hiddenIn, ...plan.newlyHidden];
  const positionDeletes = await mapLimit(deletes, 4, ({ file, hidden }) => positionsOf(parts, file, hidden));
  return {
    dataFiles: plan.added.map((file) => file.dataFile),
    removed: plan.removed.map((file) => file.dataFile.path),
    positionDeletes: positionDeletes.filter((deletes) => deletes.positions.length > 0),
    operation: switches ? 'overwrite' : 'append',
  };
}

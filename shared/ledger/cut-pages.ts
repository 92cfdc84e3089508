/**
 * A checkpoint's cut in cut pages (`layout.ts`): immutable items written before the allocation that names them,
 * each bounded by {@link CUT_PAGE_BUDGET_BYTES}, read with paged Queries. A reader checks it found exactly the page
 * counts the record names, so a lost page fails loudly instead of shrinking the cut. A begin notes the pages it is
 * about to write (a pending-cut note), so the pages of a begin that crashed before its allocation are found again.
 * Size bound (L3): a page is at most 100 KB of entries and keys; a pending-cut note is fixed fields.
 */
import { DeleteCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { queryAll, queryPages, send, sendConditional, type TableRef } from '../aws/dynamo.ts';
import { mapLimit } from '../concurrency.ts';
import { PipelineError } from '../errors.ts';
import { CUT_PAGE_BUDGET_BYTES, keys, PENDING_CUT_PREFIX } from './layout.ts';

/** One partition of a cut: the previous committed offset (-1: none) and this checkpoint's cut (C2). */
export interface CutEntry {
  readonly partition: string;
  readonly previous: number;
  readonly cut: number;
}

/** How many cut pages a begin wrote: per shard the pages of changed partitions, and the unchanged pages. */
export interface CutPages {
  readonly changed: readonly number[];
  readonly unchanged: number;
}

/** What names a cut: the checkpoint attempt whose record holds it, its `cutId` and its page counts. */
export interface CutReference {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly cutId: string;
  readonly cutPages: CutPages;
}

/** A cut page the checkpoint record names is missing, or an extra one appeared: the cut cannot be trusted. */
export class CutPagesError extends PipelineError {}

/** The ledger table and the pipeline whose cut pages are read and written. */
export interface CutLedger extends TableRef {
  readonly pipeline: string;
}

/** Splits entries into pages of at most {@link CUT_PAGE_BUDGET_BYTES} (DynamoDB's size rule, upper bound). */
export function paginateCut(entries: readonly CutEntry[]): CutEntry[][] {
  const pages: CutEntry[][] = [];
  let page: CutEntry[] = [];
  let bytes = 3;
  for (const entry of entries) {
    const size = cutEntrySize(entry);
    if (page.length > 0 && bytes + size > CUT_PAGE_BUDGET_BYTES) {
      pages.push(page);
      page = [];
      bytes = 3;
    }
    page.push(entry);
    bytes += size;
  }
  if (page.length > 0) pages.push(page);
  return pages;
}

/** An upper bound of one entry's DynamoDB size: a list (3) of a string and two numbers (≤ 21 each), 1 per element. */
export function cutEntrySize(entry: CutEntry): number {
  return 3 + 3 + Buffer.byteLength(entry.partition, 'utf8') + 2 * 21;
}

function parseCutTuple(tuple: unknown): CutEntry {
  if (
    !Array.isArray(tuple) ||
    tuple.length !== 3 ||
    typeof tuple[0] !== 'string' ||
    !Number.isSafeInteger(tuple[1]) ||
    !Number.isSafeInteger(tuple[2])
  ) {
    throw new CutPagesError(`a cut page holds a malformed entry ${JSON.stringify(tuple)}`);
  }
  return { partition: tuple[0], previous: tuple[1] as number, cut: tuple[2] as number };
}

/**
 * Writes a cut as pages under a fresh `cutId` (before the allocation that names it): the changed partitions of
 * each shard, then the unchanged ones, each page at most {@link CUT_PAGE_BUDGET_BYTES} of entries. Each put is
 * conditioned on the page not existing (a cutId is never reused). Returns the page counts for the record.
 */
export async function writeCut(
  at: CutLedger,
  cutId: string,
  shards: readonly (readonly CutEntry[])[],
  unchanged: readonly CutEntry[],
): Promise<CutPages> {
  const puts: { key: { pk: string; sk: string }; entries: readonly CutEntry[] }[] = [];
  const changed = shards.map((entries, shard) => {
    const pages = paginateCut(entries);
    pages.forEach((page, index) => {
      puts.push({ key: keys.changedCutPage(at.pipeline, cutId, shard, index), entries: page });
    });
    return pages.length;
  });
  const unchangedPages = paginateCut(unchanged);
  unchangedPages.forEach((page, index) => {
    puts.push({ key: keys.unchangedCutPage(at.pipeline, cutId, index), entries: page });
  });
  await mapLimit(puts, 8, async ({ key, entries }) => {
    await send(
      at.doc,
      new PutCommand({
        TableName: at.table,
        Item: { ...key, entries: entries.map((e) => [e.partition, e.previous, e.cut]) },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
      'dynamodb:PutItem(cut page)',
    );
  });
  return { changed, unchanged: unchangedPages.length };
}

/** The cut entries of one shard (changed partitions only), or of the whole cut; in page order. */
export async function readCut(at: CutLedger, record: CutReference, shard?: number): Promise<CutEntry[]> {
  const prefix = shard === undefined ? undefined : keys.changedCutPagesOf(shard);
  const pk = keys.cutPagesPk(at.pipeline, record.cutId);
  const expected =
    shard === undefined
      ? record.cutPages.changed.reduce((sum, n) => sum + n, 0) + record.cutPages.unchanged
      : (record.cutPages.changed[shard] ?? 0);
  const items = await queryAll(
    at.doc,
    {
      TableName: at.table,
      ConsistentRead: true,
      KeyConditionExpression: prefix ? 'pk = :pk AND begins_with(sk, :prefix)' : 'pk = :pk',
      ExpressionAttributeValues: prefix ? { ':pk': pk, ':prefix': prefix } : { ':pk': pk },
    },
    'dynamodb:Query(cut pages)',
  );
  const entries = items.flatMap((item) => ((item.entries ?? []) as unknown[]).map(parseCutTuple));
  if (items.length !== expected) {
    throw new CutPagesError(
      `checkpoint ${record.checkpointId} attempt ${record.attempt}: found ${items.length} cut pages${shard === undefined ? '' : ` of shard ${shard}`} under ${record.cutId}, its record names ${expected}`,
    );
  }
  return entries;
}

/** Deletes every page of a cut that is no longer needed (a lost begin, an aborted attempt, a superseded cut). */
export async function deleteCut(at: CutLedger, cutId: string): Promise<number> {
  if (!cutId) return 0;
  const pk = keys.cutPagesPk(at.pipeline, cutId);
  const items = await queryAll(
    at.doc,
    {
      TableName: at.table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': pk },
      ProjectionExpression: 'sk',
    },
    'dynamodb:Query(cut pages)',
  );
  const found = items.map((item) => String(item.sk));
  await mapLimit(found, 8, async (sk) => {
    // Already gone (another cleanup deleted it) is as good as deleted.
    await sendConditional(
      at.doc,
      new DeleteCommand({
        TableName: at.table,
        Key: { pk, sk },
        ConditionExpression: 'attribute_exists(entries)',
      }),
      'dynamodb:DeleteItem(cut page)',
    );
  });
  return found.length;
}

/**
 * Notes that a begin is about to write the pages of `cutId` (before it writes them). The begin removes the note
 * once the allocation names the cut or its pages are deleted; a begin that crashed in between leaves the note,
 * and {@link pendingCuts} finds its pages again (no record names them, so nothing else ever would).
 */
export async function notePendingCut(at: CutLedger, cutId: string, now: number): Promise<void> {
  await send(
    at.doc,
    new PutCommand({
      TableName: at.table,
      Item: { ...keys.pendingCut(at.pipeline, cutId), cutId, notedAt: now },
    }),
    'dynamodb:PutItem(pending cut)',
  );
}

export async function clearPendingCut(at: CutLedger, cutId: string): Promise<void> {
  await send(
    at.doc,
    new DeleteCommand({ TableName: at.table, Key: keys.pendingCut(at.pipeline, cutId) }),
    'dynamodb:DeleteItem(pending cut)',
  );
}

/** Pending-cut notes written before `notedBefore`, at most `limit`, oldest cutIds first by key. */
export async function pendingCuts(at: CutLedger, notedBefore: number, limit: number): Promise<string[]> {
  const found: string[] = [];
  const pages = queryPages(
    at.doc,
    {
      TableName: at.table,
      ConsistentRead: true,
      KeyConditionExpression: 'pk = :pk AND begins_with(sk, :prefix)',
      ExpressionAttributeValues: { ':pk': keys.checkpointPk(at.pipeline), ':prefix': PENDING_CUT_PREFIX },
    },
    'dynamodb:Query(pending cuts)',
  );
  for await (const page of pages) {
    for (const item of page) {
      if (typeof item.cutId === 'string' && typeof item.notedAt === 'number' && item.notedAt < notedBefore)
        found.push(item.cutId);
      if (found.length >= limit) return found;
    }
  }
  return found;
}

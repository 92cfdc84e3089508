/** Reads a pipeline's ledger and staged output back, normalised so two runs can be compared. */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, QueryCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { inlineItemsOf } from '../../shared/ledger/inline-entries.ts';
import { ENTRY_BYTES } from '../../shared/ledger/key-window.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { decodeNdjson } from '../../shared/sink/ndjson.ts';

export type Item = Record<string, unknown>;

export async function scanPipeline(clients: AwsClients, table: string, pipeline: string): Promise<Item[]> {
  const doc = DynamoDBDocumentClient.from(clients.dynamodb);
  const items: Item[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new ScanCommand({
        TableName: table,
        ConsistentRead: true,
        FilterExpression: 'begins_with(pk, :prefix)',
        ExpressionAttributeValues: { ':prefix': `${pipeline}#` },
        ExclusiveStartKey: start,
      }),
    );
    items.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start);
  return items.sort((a, b) => `${a.pk}|${a.sk}`.localeCompare(`${b.pk}|${b.sk}`));
}

export interface LedgerView {
  fences: Record<string, number>;
  entries: Array<Omit<StagedFileEntry, 'key' | 'attemptId' | 'stagedAt'>>;
  claims: Record<string, string>;
  state: Record<string, Item>;
}

/** The ledger without what legitimately differs between runs (attempt ids, times). */
export async function ledgerView(clients: AwsClients, table: string, pipeline: string): Promise<LedgerView> {
  const view: LedgerView = { fences: {}, entries: [], claims: {}, state: {} };
  for (const item of await scanPipeline(clients, table, pipeline)) {
    const pk = String(item.pk);
    if (/#FENCE(#\d+)?$/.test(pk)) {
      // A fence shard, or the legacy key (a fence of the release before the shards, or a moved marker without one).
      if (typeof item.stagedOffset === 'number')
        view.fences[String(item.sk)] = Math.max(view.fences[String(item.sk)] ?? -1, item.stagedOffset);
      for (const entry of inlineEntries(pipeline, item)) {
        const { key: _key, attemptId: _a, stagedAt: _s, ...rest } = entry;
        view.entries.push(rest);
      }
    } else if (pk.includes('#STAGED#')) {
      const { pk: _pk, sk: _sk, key: _key, attemptId: _a, stagedAt: _s, ...rest } = item;
      view.entries.push(rest as LedgerView['entries'][number]);
    } else if (pk.includes('#CLAIM#')) view.claims[String(item.idempotencyKey)] = String(item.claimant);
    else if (pk.includes('#STATE#')) {
      const { pk: _pk, sk: _sk, ...rest } = item;
      view.state[String(item.stateKey)] = rest;
    }
  }
  view.entries.sort((a, b) => entryOrder(a).localeCompare(entryOrder(b)));
  return view;
}

const entryOrder = (e: { topic: string; partition: number; lastOffset: number; stream: string }) =>
  `${e.topic}|${String(e.partition).padStart(6, '0')}|${String(e.lastOffset).padStart(20, '0')}|${e.stream}`;

/** The staged entries a fence item holds inline (`inline-entries.ts`), well-formed ones only. */
export function inlineEntries(pipeline: string, fence: Item): StagedFileEntry[] {
  if (typeof fence.topic !== 'string' || typeof fence.partition !== 'number') return [];
  const where = {
    pipeline,
    topic: fence.topic,
    partition: fence.partition,
    fence: { pk: String(fence.pk), sk: String(fence.sk) },
  };
  return inlineItemsOf(fence, where, { above: -1, upTo: Number.MAX_SAFE_INTEGER }).flatMap((item) =>
    item.kind === 'entry' ? [item.entry] : [],
  );
}

export async function stagedEntries(
  clients: AwsClients,
  table: string,
  pipeline: string,
): Promise<StagedFileEntry[]> {
  const items = await scanPipeline(clients, table, pipeline);
  const asItems = items.filter((item) =>
    String(item.pk).includes('#STAGED#'),
  ) as unknown as StagedFileEntry[];
  const inline = items
    .filter((item) => /#FENCE#\d+$/.test(String(item.pk)))
    .flatMap((f) => inlineEntries(pipeline, f));
  return [...asItems, ...inline].sort((a, b) => entryOrder(a).localeCompare(entryOrder(b)));
}

export async function readObject(clients: AwsClients, bucket: string, key: string): Promise<Buffer> {
  const got = await clients.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await got.Body!.transformToByteArray());
}

/** Every row of every staged file the ledger references, sorted by stream and lineage. */
export async function stagedRows(
  clients: AwsClients,
  table: string,
  bucket: string,
  pipeline: string,
): Promise<Array<{ stream: string; row: Item }>> {
  const rows: Array<{ stream: string; row: Item }> = [];
  for (const entry of await stagedEntries(clients, table, pipeline)) {
    const body = await readObject(clients, bucket, entry.key);
    for (const row of decodeNdjson(body, entry.gzip)) rows.push({ stream: entry.stream, row: row as Item });
  }
  const order = (r: { stream: string; row: Item }) => {
    const s = r.row.source as { partition: number; offset: number };
    return `${r.stream}|${String(s.partition).padStart(4, '0')}|${String(s.offset).padStart(12, '0')}`;
  };
  return rows.sort((a, b) => order(a).localeCompare(order(b)));
}

/** Staged output rows per `orderId` over everything the ledger references (the `orders` transform's rows). */
export async function stagedOutputCounts(
  clients: AwsClients,
  table: string,
  bucket: string,
  pipeline: string,
): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const { stream, row } of await stagedRows(clients, table, bucket, pipeline)) {
    if (stream !== 'output') continue;
    const id = String(row.orderId);
    counts[id] = (counts[id] ?? 0) + 1;
  }
  return counts;
}

/** A partition's key-window buckets as stored (partition-scoped idempotency): `[seq, keys it holds]`. */
export async function keyWindowBuckets(
  clients: AwsClients,
  table: string,
  pipeline: string,
  topic: string,
  partition: number,
): Promise<Array<[number, number]>> {
  const { Items = [] } = await DynamoDBDocumentClient.from(clients.dynamodb).send(
    new QueryCommand({
      TableName: table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': keys.keyWindowPk(pipeline, topic, partition) },
      ConsistentRead: true,
    }),
  );
  return Items.map((item) => [item.seq as number, (item.entries as Uint8Array).length / ENTRY_BYTES]);
}

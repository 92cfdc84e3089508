/**
 * The ledger's record of what the Iceberg table holds (keys in `layout.ts`): per published checkpoint the snapshot
 * it became, and the published mark, the last checkpoint published with every earlier one. The table itself is
 * not trusted to say this alone: table maintenance expires snapshots (their summaries, which name the checkpoints,
 * go with them) and an operator can roll the table back; the ledger is what the coordinator decides by.
 *
 * Both items are small and of fixed fields (L3; the one list, of the checkpoints that switch to a replay
 * generation, holds one id per switch an operator asked for), moved only by conditional writes:
 * - a snapshot record is written once; writing it again with the same snapshot id is a no-op (a retry, a
 *   concurrent roll-forward), with another id a {@link TableSnapshotConflictError} (two snapshots for one
 *   checkpoint: the protocol is broken and nothing may go on as if it were not);
 * - the mark moves only from the checkpoint just below to the one recorded, so it never passes a checkpoint whose
 *   snapshot is not recorded;
 * - the mark item holds the ledger's incarnation (`iceberg/checkpoint-identity.ts`), created once, before the
 *   first swap, and carried by every move of the mark.
 */
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { sendConditional, type TableRef } from '../aws/dynamo.ts';
import { PipelineError } from '../errors.ts';
import { readAttributes } from './checkpoint-marks.ts';
import { keys } from './layout.ts';

/** The snapshot a checkpoint became, as the ledger records it. */
export interface TableSnapshot {
  readonly checkpointId: number;
  readonly snapshotId: bigint;
  /**
   * The snapshot's sequence number, or (when it was found only through the table's properties, its snapshot
   * already expired) the sequence number of main's head when it was recorded, which descends from it. A table
   * whose main head has a lower one was rolled back below it.
   */
  readonly sequenceNumber: number;
  readonly recordedAt: number;
  /**
   * The checkpoints up to this one whose manifests switch readers to a replay generation, ascending: the next
   * publish reads only those manifests to know which rows readers show (`generation-changes.ts`), not the whole
   * log. A handful (one per replay an operator switches to). Absent in a record from before it was kept: the next
   * publish reads the log.
   */
  readonly switches?: readonly number[];
}

/**
 * The ledger's incarnation: an id created once, that the table's evidence of this ledger's checkpoints names
 * (`iceberg/checkpoint-identity.ts`, whose `LedgerRef` has the same shape).
 */
export interface LedgerIncarnation {
  readonly id: string;
  /** Evidence naming no ledger is this ledger's: it published to the table before incarnations. */
  readonly adoptsUnnamed: boolean;
}

/** The published mark: checkpoint `upTo` and every one before it are in the table. */
export interface PublishedMark {
  readonly upTo: number;
  /** The snapshot of checkpoint `upTo` (absent while `upTo` is 0). */
  readonly snapshot?: TableSnapshot;
  /** This ledger's incarnation; absent until {@link TableSnapshots.createIncarnation}. */
  readonly ledger?: LedgerIncarnation;
}

/** A second, different snapshot id recorded for one checkpoint, or a mark asked to skip a checkpoint. */
export class TableSnapshotConflictError extends PipelineError {}

/** Snapshot ids use 63 bits: stored as decimal text, which DynamoDB numbers would hold but the SDK would round. */
function snapshotOf(item: Record<string, unknown> | undefined): TableSnapshot | undefined {
  if (item === undefined) return undefined;
  const { checkpointId, snapshotId, sequenceNumber, recordedAt } = item;
  if (
    !Number.isSafeInteger(checkpointId) ||
    typeof snapshotId !== 'string' ||
    !/^\d{1,19}$/.test(snapshotId) ||
    !Number.isSafeInteger(sequenceNumber)
  ) {
    throw new TableSnapshotConflictError(`a table snapshot record is malformed: ${JSON.stringify(item)}`);
  }
  const { switches } = item;
  const listed =
    Array.isArray(switches) && switches.every((id) => Number.isSafeInteger(id))
      ? { switches: (switches as number[]).slice().sort((a, b) => a - b) }
      : {};
  return {
    checkpointId: checkpointId as number,
    snapshotId: BigInt(snapshotId),
    sequenceNumber: sequenceNumber as number,
    recordedAt: Number(recordedAt ?? 0),
    ...listed,
  };
}

function markOf(item: Record<string, unknown> | undefined): PublishedMark {
  if (item === undefined) return { upTo: 0 };
  const upTo = Number.isSafeInteger(item.upTo) ? (item.upTo as number) : 0;
  const ledger =
    typeof item.ledger === 'string'
      ? { ledger: { id: item.ledger, adoptsUnnamed: item.adoptsUnnamed === true } }
      : {};
  return upTo === 0
    ? { upTo, ...ledger }
    : { upTo, snapshot: snapshotOf({ ...item, checkpointId: upTo }), ...ledger };
}

export class TableSnapshots {
  private readonly at: TableRef & { readonly pipeline: string };

  constructor(dynamodb: DynamoDBClient, table: string, pipeline: string) {
    this.at = { doc: ledgerDocumentClient(dynamodb), table, pipeline };
  }

  get pipeline(): string {
    return this.at.pipeline;
  }

  /** Checkpoint `checkpointId`'s recorded snapshot, read strongly consistently. */
  async read(checkpointId: number): Promise<TableSnapshot | undefined> {
    return snapshotOf(
      await readAttributes(this.at, keys.tableSnapshot(this.at.pipeline, checkpointId), 'readTableSnapshot'),
    );
  }

  /** The published mark; `upTo` 0 before the first checkpoint is published. */
  async readMark(): Promise<PublishedMark> {
    return markOf(await this.readMarkItem());
  }

  private readMarkItem(): Promise<Record<string, unknown> | undefined> {
    return readAttributes(this.at, keys.publishedMark(this.at.pipeline), 'readPublishedMark');
  }

  /**
   * The mark with this ledger's incarnation, created if it has none: with the mark when there is none (a new
   * ledger: evidence in the table naming no ledger is not its), else over the mark already there (a ledger that
   * published before incarnations: such evidence is its own). Conditional, so concurrent publishers create one.
   */
  async createIncarnation(now: number): Promise<PublishedMark> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const item = await this.readMarkItem();
      const mark = markOf(item);
      if (mark.ledger) return mark;
      const written = await sendConditional(
        this.at.doc,
        new PutCommand({
          TableName: this.at.table,
          Item: {
            ...(item ?? { upTo: 0 }),
            ...keys.publishedMark(this.at.pipeline),
            ledger: randomUUID(),
            adoptsUnnamed: item !== undefined,
            ledgerCreatedAt: now,
          },
          ConditionExpression:
            item === undefined ? 'attribute_not_exists(pk)' : 'attribute_not_exists(ledger) AND upTo = :upTo',
          ...(item === undefined ? {} : { ExpressionAttributeValues: { ':upTo': item.upTo ?? 0 } }),
        }),
        'dynamodb:PutItem(ledger incarnation)',
      );
      if (written !== undefined) return markOf(await this.readMarkItem());
    }
    throw new TableSnapshotConflictError(
      'the published mark kept moving while its ledger incarnation was created',
    );
  }

  /**
   * Records the snapshot `snapshot.checkpointId` became: written once; the same snapshot id again is a no-op and
   * answers the record already there, another id throws {@link TableSnapshotConflictError}.
   */
  async record(snapshot: Omit<TableSnapshot, 'recordedAt'>, now: number): Promise<TableSnapshot> {
    const item = {
      checkpointId: snapshot.checkpointId,
      snapshotId: String(snapshot.snapshotId),
      sequenceNumber: snapshot.sequenceNumber,
      recordedAt: now,
      ...(snapshot.switches ? { switches: [...snapshot.switches] } : {}),
    };
    const written = await sendConditional(
      this.at.doc,
      new PutCommand({
        TableName: this.at.table,
        Item: { ...keys.tableSnapshot(this.at.pipeline, snapshot.checkpointId), ...item },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
      'dynamodb:PutItem(table snapshot)',
    );
    if (written !== undefined) return snapshotOf(item) as TableSnapshot;
    const existing = await this.read(snapshot.checkpointId);
    if (existing?.snapshotId !== snapshot.snapshotId) {
      throw new TableSnapshotConflictError(
        `checkpoint ${snapshot.checkpointId} is recorded as table snapshot ${existing?.snapshotId}, not ${snapshot.snapshotId}`,
      );
    }
    return existing;
  }

  /**
   * Moves the mark from `snapshot.checkpointId - 1` to `snapshot.checkpointId` (a record of it written first).
   * A mark already at or past it is left as it is (a retry, a concurrent publisher); one below the checkpoint just
   * before throws {@link TableSnapshotConflictError}: the mark never skips a checkpoint.
   */
  async advanceMark(snapshot: TableSnapshot, now: number, ledger?: LedgerIncarnation): Promise<void> {
    const previous = snapshot.checkpointId - 1;
    const written = await sendConditional(
      this.at.doc,
      new PutCommand({
        TableName: this.at.table,
        Item: {
          ...keys.publishedMark(this.at.pipeline),
          upTo: snapshot.checkpointId,
          snapshotId: String(snapshot.snapshotId),
          sequenceNumber: snapshot.sequenceNumber,
          recordedAt: snapshot.recordedAt,
          ...(snapshot.switches ? { switches: [...snapshot.switches] } : {}),
          updatedAt: now,
          ...(ledger ? { ledger: ledger.id, adoptsUnnamed: ledger.adoptsUnnamed } : {}),
        },
        ConditionExpression:
          previous === 0 ? 'attribute_not_exists(pk) OR upTo = :previous' : 'upTo = :previous',
        ExpressionAttributeValues: { ':previous': previous },
      }),
      'dynamodb:PutItem(published mark)',
    );
    if (written !== undefined) return;
    const mark = await this.readMark();
    if (mark.upTo < snapshot.checkpointId) {
      throw new TableSnapshotConflictError(
        `the published mark is at checkpoint ${mark.upTo}: it cannot move to ${snapshot.checkpointId} past ${previous}`,
      );
    }
  }
}

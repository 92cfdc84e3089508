/**
 * Steps of the coordinator tests: one whole checkpoint, the steps after prepare, what lies under a prefix, and what
 * a compromised processor may do to a staged entry. Against the resources of `freshResources`.
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { expect } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { Coordinator } from '../../shared/coordinator/coordinator.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import type { TestResources } from './aws.ts';
import { defaultRows } from './staging.ts';

export interface AttemptRef {
  execution: string;
  checkpointId: number;
  attempt: number;
}

/** One checkpoint by the local coordinator (the state machine in the interpreter): it commits, or finds nothing. */
export async function checkpoint(res: TestResources, settings: Settings): Promise<void> {
  const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(['committed', 'empty']).toContain(outcome.status);
}

/** Decide, promote every shard, commit, clean up every shard: the steps after prepare, in order. */
export async function finish(core: Coordinator, ref: AttemptRef, shards: readonly number[]): Promise<void> {
  await core.decide(ref);
  for (const shard of shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of shards) await core.cleanup({ ...ref, shard });
}

/** Every object key of the test bucket under `prefix`. */
export async function keysUnder(res: TestResources, prefix: string): Promise<string[]> {
  const found: string[] = [];
  for await (const object of listObjects(res.clients.s3, res.bucket, prefix)) found.push(object.key);
  return found;
}

/**
 * What a compromised processor may do (its role puts objects under its staged prefix and items under its
 * pipeline's partition keys): stage other rows for the same offsets under `attemptId` (a new key, or the entry's
 * own key when `attemptId` is the entry's), and put a well-formed entry naming them over the existing entry's item
 * (no fence condition: IAM cannot demand one).
 */
export async function swapEntry(
  res: TestResources,
  settings: Settings,
  old: StagedFileEntry,
  attemptId: string,
): Promise<StagedFileEntry> {
  const rows = defaultRows(old).map((row) => ({ ...row, swapped: attemptId }));
  const encoded = encodeNdjson(rows, settings.gzip);
  const key = stagedObjectKey(settings.pipelineId, old, attemptId, settings.gzip);
  await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: encoded.body }));
  const entry: StagedFileEntry = {
    ...old,
    key,
    attemptId,
    recordCount: encoded.recordCount,
    bytes: encoded.bytes,
    sha256: encoded.sha256,
    md5: encoded.md5,
    stagedAt: Date.now(),
  };
  await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
    new PutCommand({
      TableName: settings.ledgerTable,
      Item: { ...keys.staged(old.pipeline, old.topic, old.partition, old.lastOffset, old.stream), ...entry },
    }),
  );
  return entry;
}

/**
 * What the committed output and the ledger say about each (lane, partition) that has dead letters: its latest dead
 * letters, the offsets a round turned into output, and its round fences. Read once, before any round is planned.
 */
import type { AwsClients } from '../aws/clients.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import type { Settings } from '../config/settings.ts';
import { CLOSED_ATTRIBUTE, parseLane, sourceLaneOf } from '../ledger/epochs.ts';
import { partitionId } from '../ledger/layout.ts';
import { readFenceItems } from '../ledger/staged-entries.ts';
import { GenerationView } from '../sink/generations.ts';
import type { Manifest, ManifestFile } from '../sink/manifest.ts';
import { readCommittedFile, readManifests } from '../sink/reader.ts';
import { type DeadLetter, isDeadLetterRow, withHeadersListed } from './dead-letter.ts';

/** A round lane's fence, as read. */
export interface RoundFence {
  readonly round: number;
  readonly stagedOffset: number;
  readonly closed: boolean;
}

/** What the committed output and the ledger say about one (lane, partition). */
export interface PartitionState {
  readonly lane: string;
  readonly partition: number;
  /** By original offset: the latest dead letter (highest round). */
  readonly latest: Map<number, DeadLetter>;
  /** Original offsets a round turned into output. */
  readonly redriven: Set<number>;
  /** Dead-letter rows that are not a dead letter redrive can read (reported, never sent). */
  unreadable: number;
  rounds: RoundFence[];
}

/** Every committed dead letter and redriven offset, and the round fences, per (lane, partition). */
export async function readPartitionStates(
  settings: Settings,
  clients: AwsClients,
): Promise<{ manifests: Manifest[]; states: PartitionState[] }> {
  const source = { s3: clients.s3, bucket: settings.bucket, pipeline: settings.pipelineId };
  const states = new Map<string, PartitionState>();
  const stateOf = (lane: string, partition: number): PartitionState => {
    const id = partitionId(lane, partition);
    let state = states.get(id);
    if (!state) {
      state = { lane, partition, latest: new Map(), redriven: new Set(), rounds: [], unreadable: 0 };
      states.set(id, state);
    }
    return state;
  };
  const manifests: Manifest[] = [];
  // Only the dead letters readers show are redriven: a replay generation's before its switch, or the range a
  // switch took from the earlier generation, are nobody's to redrive.
  const view = new GenerationView();
  for await (const manifest of readManifests(source)) {
    manifests.push(manifest);
    view.apply(manifest);
  }
  for (const manifest of manifests) {
    for (const file of manifest.files) await readFile(source, manifest, file, stateOf, view);
  }
  const items = await readFenceItems(
    ledgerDocumentClient(clients.dynamodb),
    settings.ledgerTable,
    settings.pipelineId,
  );
  for (const item of items) {
    const lane = typeof item.topic === 'string' ? parseLane(item.topic) : undefined;
    if (lane?.round === undefined || typeof item.stagedOffset !== 'number') continue;
    const state = stateOf(sourceLaneOf(item.topic as string), item.partition as number);
    state.rounds.push({
      round: lane.round,
      stagedOffset: item.stagedOffset,
      closed: item[CLOSED_ATTRIBUTE] !== undefined,
    });
  }
  for (const state of states.values()) state.rounds.sort((a, b) => a.round - b.round);
  return { manifests, states: [...states.values()].sort(byLaneAndPartition) };
}

async function readFile(
  source: { s3: AwsClients['s3']; bucket: string; pipeline: string },
  manifest: Manifest,
  file: ManifestFile,
  stateOf: (lane: string, partition: number) => PartitionState,
  view: GenerationView,
): Promise<void> {
  const lane = parseLane(file.topic);
  if (lane === undefined) return;
  const round = lane.round ?? 0;
  // Output of the original lanes is never needed; output of a round lane says which records it redrove.
  if (file.stream === 'output' && round === 0) return;
  if (file.stream === 'deadletter' && view.visibility(file) === 'none') return;
  // Taken on the first row the run keeps: a partition whose dead letters a switch hides is nobody's to report.
  const state = () => stateOf(sourceLaneOf(file.topic), file.partition);
  // Checked as the committed reader checks it; a slice of a merged object by one ranged read of its bytes.
  for await (const row of readCommittedFile(source, file, manifest.checkpointId)) {
    const offset = (row.source as { offset?: unknown } | undefined)?.offset;
    if (!Number.isSafeInteger(offset)) continue;
    // Output of a round, or a round's note that it resolved the record without a row (a duplicate, state only).
    if (file.stream === 'output' || (round > 0 && row.resolved === true)) {
      state().redriven.add(offset as number);
      continue;
    }
    // A schema misfit's dead letter (written by promote) holds a row, not a record: nothing to redrive.
    // In a round lane it is that round's outcome for the record: handled.
    if ('row' in row) {
      const held = state();
      if (round > 0) held.redriven.add(offset as number);
      continue;
    }
    if (!view.shows(file.topic, file.partition, offset as number)) continue;
    withHeadersListed(row);
    if (!isDeadLetterRow(row)) {
      // Not silently: the run reports how many it could not read.
      state().unreadable++;
      continue;
    }
    const known = state().latest.get(row.source.offset);
    if (known !== undefined && known.round > round) continue;
    state().latest.set(row.source.offset, {
      offset: row.source.offset,
      topic: row.source.topic,
      error: row.error,
      raw: row.raw,
      round,
      checkpointId: manifest.checkpointId,
    });
  }
}

function byLaneAndPartition(a: PartitionState, b: PartitionState): number {
  return a.lane < b.lane ? -1 : a.lane > b.lane ? 1 : a.partition - b.partition;
}

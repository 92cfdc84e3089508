/**
 * The coordinator's working objects: per checkpoint attempt and shard, the promotion plan written by prepare and
 * the promotion result written by promote. They live under the in-progress prefix (never under `final/`, which
 * holds only what manifests list) so that Step Functions passes references, not file lists:
 *
 * ```
 * <pipeline>/_inprogress/_checkpoints/<N, 12 digits>/<attempt>/plan-<shard>.json
 * <pipeline>/_inprogress/_checkpoints/<N, 12 digits>/<attempt>/promoted-<shard>.json
 * ```
 * Cleanup removes a committed checkpoint's folder, abort an aborted attempt's.
 */
import { padCheckpointId } from '../ledger/layout.ts';
import { inProgressPrefix } from './layout.ts';

export const CHECKPOINT_WORK_DIR = '_checkpoints';

export function checkpointWorkPrefix(pipeline: string): string {
  return `${inProgressPrefix(pipeline)}${CHECKPOINT_WORK_DIR}/`;
}

export function checkpointAttemptPrefix(pipeline: string, checkpointId: number, attempt: number): string {
  return `${checkpointWorkPrefix(pipeline)}${padCheckpointId(checkpointId)}/${attempt}/`;
}

export function planKey(pipeline: string, checkpointId: number, attempt: number, shard: number): string {
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}plan-${shard}.json`;
}

export function promotedKey(pipeline: string, checkpointId: number, attempt: number, shard: number): string {
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}promoted-${shard}.json`;
}

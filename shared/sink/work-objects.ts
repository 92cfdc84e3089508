/**
 * The coordinator's working objects: per checkpoint attempt and shard, the promotion plan written by prepare and
 * the promotion result written by promote. They live under `<pl>/_coordinator/`, a prefix only the coordinator's
 * roles may write (never under `_inprogress/`, which the processor writes, nor under `final/`, which holds only
 * what manifests list), so that Step Functions passes references, not file lists:
 *
 * ```
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/plan-<shard>.json
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/promoted-<shard>.json
 * ```
 * Cleanup removes a committed checkpoint's folder, abort an aborted attempt's. Even so, nothing read from here is
 * trusted blindly: a plan is used only if its SHA-256 equals the digest its shard's vote recorded in the ledger,
 * and every key in it is re-derived from the layout (`plan-store.ts`, `promoter.ts`).
 */
import { padCheckpointId } from '../ledger/layout.ts';

export const CHECKPOINT_WORK_DIR = '_coordinator';

export function checkpointWorkPrefix(pipeline: string): string {
  return `${pipeline}/${CHECKPOINT_WORK_DIR}/`;
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

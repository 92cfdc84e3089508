/**
 * The coordinator's working objects: per checkpoint attempt, the promotion plans and the candidate final objects
 * written by prepare, and the promotion results written by promote. They live under `<pl>/_coordinator/`, a
 * prefix only the coordinator's roles may write (never under `_inprogress/`, which the processor writes, nor under
 * `final/`, which holds only what manifests list), so that Step Functions passes references, not file lists:
 *
 * ```
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/plan-<shard>-<SHA-256 of the plan's bytes>.json
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/candidate-<SHA-256 of the candidate's bytes>
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/promoted-<shard>.json
 * <pipeline>/_coordinator/<N, 12 digits>/<attempt>/staged/<the staged key below _inprogress/>   (read only)
 * ```
 * A candidate is a final object's bytes, merged by prepare from the staged bytes it verified, and copied
 * server-side to its final key by promote, pinned to the ETag prepare's write returned: what was verified is what
 * is published, whatever the processor does to its staged objects after prepare read them. The `staged/` copies
 * belong to plans of the release before candidates (its prepare copied each covered staged object there, and its
 * plans name no candidates): promote still reads them for such a plan, so a checkpoint decided before an upgrade
 * rolls forward after it; nothing writes them any more.
 *
 * Cleanup removes a committed checkpoint's folder (every attempt), abort an aborted attempt's, and each cleanup
 * also removes what is left of checkpoints below the committed one (a zombie step's late write). Even so, nothing
 * read from here is trusted blindly: a plan is used only if its SHA-256 equals the digest its shard's vote
 * recorded in the ledger, a candidate only at the key of this attempt its SHA-256 names and with the ETag the
 * voted plan records, and every key is re-derived from the layout (`plan-store.ts`, `promoter.ts`).
 *
 * Plans and candidates are content-addressed: two prepare runs of one shard (a Step Functions retry while the
 * first invocation still runs) may plan different bytes if a covered ledger entry changed between their reads,
 * and the vote keeps the last digest written. Under one key per shard the later plan write could replace the plan
 * of the later vote, and the decided checkpoint could never find the plan it voted for. With the digest in the
 * key, every voted digest names the bytes its own run wrote (write-once, before that run's vote), and the
 * candidates that same run merged.
 */
import { padCheckpointId } from '../ledger/layout.ts';
import { inProgressPrefix } from '../sink/layout.ts';

export const CHECKPOINT_WORK_DIR = '_coordinator';
/** The folder of an attempt that holds its verified copies of staged objects (plans without candidates). */
export const STAGED_COPY_DIR = 'staged';

export function checkpointWorkPrefix(pipeline: string): string {
  return `${pipeline}/${CHECKPOINT_WORK_DIR}/`;
}

export function checkpointAttemptPrefix(pipeline: string, checkpointId: number, attempt: number): string {
  return `${checkpointWorkPrefix(pipeline)}${padCheckpointId(checkpointId)}/${attempt}/`;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * Where the plan of (checkpoint, attempt, shard) whose bytes hash to `digest` (lower-case hex SHA-256) lives. The
 * digest is checked, so no value read from a record can turn into another key.
 */
export function planKey(
  pipeline: string,
  checkpointId: number,
  attempt: number,
  shard: number,
  digest: string,
): string {
  if (!SHA256_HEX.test(digest)) throw new RangeError(`plan digest ${digest} is not a hex SHA-256`);
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}plan-${shard}-${digest}.json`;
}

export function promotedKey(pipeline: string, checkpointId: number, attempt: number, shard: number): string {
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}promoted-${shard}.json`;
}

/**
 * Where the prepare of (checkpoint, attempt) of the release before candidates copied the staged object
 * `stagedKey`, and where promote reads it for a plan without candidates: a pure function of the two.
 * Attempt-scoped, so a copy never outlives the attempt that verified it into a later one. `stagedKey` must be a key
 * under this pipeline's staged prefix (callers have checked it with `parseStagedObjectKey`).
 */
export function stagedCopyKey(
  pipeline: string,
  checkpointId: number,
  attempt: number,
  stagedKey: string,
): string {
  const staged = inProgressPrefix(pipeline);
  if (!stagedKey.startsWith(staged)) throw new RangeError(`${stagedKey} is not under ${staged}`);
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}${STAGED_COPY_DIR}/${stagedKey.slice(staged.length)}`;
}

/**
 * Where prepare of (checkpoint, attempt) writes the candidate final object whose bytes hash to `sha256` (lower-case
 * hex), and where promote copies it from. Content-addressed, so two prepare runs of one shard that merge different
 * bytes (an entry changed between their reads) never meet under one key, and a write-once 412 means "these bytes
 * are there". Hex only: the key goes into CopyObject's copy-source header as it is.
 */
export function candidateKey(
  pipeline: string,
  checkpointId: number,
  attempt: number,
  sha256: string,
): string {
  if (!SHA256_HEX.test(sha256)) throw new RangeError(`candidate digest ${sha256} is not a hex SHA-256`);
  return `${checkpointAttemptPrefix(pipeline, checkpointId, attempt)}candidate-${sha256}`;
}

/** The checkpoint id a working-object key belongs to, or undefined for a key that is not one. */
export function workObjectCheckpointId(pipeline: string, key: string): number | undefined {
  const prefix = checkpointWorkPrefix(pipeline);
  if (!key.startsWith(prefix)) return undefined;
  const folder = key.slice(prefix.length).split('/', 1)[0]!;
  const id = Number(folder);
  // Round-trips: only the folder padCheckpointId names (so never a second spelling of an id).
  return /^\d+$/.test(folder) && Number.isSafeInteger(id) && padCheckpointId(id) === folder ? id : undefined;
}

/**
 * Where the S3 bytes a run moved through Lambda went: each counted call attributed by role, direction and what its
 * key is (staged, candidate, final, manifest, the coordinator's working objects).
 */
import type { CountedCall } from '../shared/aws/call-counter.ts';
import { checkpointWorkPrefix, STAGED_COPY_DIR } from '../shared/coordinator/work-objects.ts';
import { finalPrefix, inProgressPrefix, manifestsPrefix } from '../shared/sink/layout.ts';

/** Where a counted S3 byte went, by key. */
export interface ByteAttribution {
  /** Processor: staged objects written (exactly-once). */
  stagedWritten: number;
  /** Processor: final objects written directly (at-least-once). */
  directFinalWritten: number;
  /** Coordinator, prepare: staged objects read to verify them and merge their bytes. */
  prepareStagedRead: number;
  /** Coordinator, prepare: candidate final objects written (promote copies them into place server-side). */
  candidateWritten: number;
  /** Coordinator, promote: reads of candidates or of copies of staged objects (plans made before candidates). */
  promoteRead: number;
  /** Coordinator: final objects written through Lambda (promote copies candidates server-side instead). */
  finalWritten: number;
  /** Coordinator: manifests written. */
  manifestWritten: number;
  /** Coordinator: plans and promoted markers (its working objects) written and read. */
  workWritten: number;
  workRead: number;
  /** Anything else (expected 0). */
  other: number;
}

type KeyKind = 'staged' | 'final' | 'manifest' | 'candidate' | 'copy' | 'work' | 'other';

function kindOf(pipeline: string, key: string): KeyKind {
  if (key.startsWith(inProgressPrefix(pipeline))) return 'staged';
  if (key.startsWith(finalPrefix(pipeline))) return 'final';
  if (key.startsWith(manifestsPrefix(pipeline))) return 'manifest';
  const work = checkpointWorkPrefix(pipeline);
  if (key.startsWith(work)) {
    // <work><checkpoint>/<attempt>/candidate-<sha256>, or …/<attempt>/staged/… for plans made before candidates.
    const rest = key.slice(work.length).split('/');
    if (rest[2]?.startsWith('candidate-')) return 'candidate';
    return rest[2] === STAGED_COPY_DIR ? 'copy' : 'work';
  }
  return 'other';
}

/** Attributes every counted byte by role, direction and key. */
export function attributeBytes(
  pipeline: string,
  processor: readonly CountedCall[],
  coordinator: readonly CountedCall[],
): ByteAttribution {
  const a: ByteAttribution = {
    stagedWritten: 0,
    directFinalWritten: 0,
    prepareStagedRead: 0,
    candidateWritten: 0,
    promoteRead: 0,
    finalWritten: 0,
    manifestWritten: 0,
    workWritten: 0,
    workRead: 0,
    other: 0,
  };
  for (const call of processor) {
    const kind = kindOf(pipeline, call.key);
    if (call.direction === 'written' && kind === 'staged') a.stagedWritten += call.bytes;
    else if (call.direction === 'written' && kind === 'final') a.directFinalWritten += call.bytes;
    else a.other += call.bytes;
  }
  for (const call of coordinator) {
    const kind = kindOf(pipeline, call.key);
    const read = call.direction === 'read';
    if (read && kind === 'staged') a.prepareStagedRead += call.bytes;
    else if (!read && kind === 'candidate') a.candidateWritten += call.bytes;
    else if (read && (kind === 'candidate' || kind === 'copy')) a.promoteRead += call.bytes;
    else if (!read && kind === 'final') a.finalWritten += call.bytes;
    else if (!read && kind === 'manifest') a.manifestWritten += call.bytes;
    else if (kind === 'work') {
      if (read) a.workRead += call.bytes;
      else a.workWritten += call.bytes;
    } else a.other += call.bytes;
  }
  return a;
}

/**
 * Whose checkpoint a table's evidence is. A pipeline id can outlive its ledger (a stack deleted and deployed again
 * over a table that was kept): the new ledger counts its checkpoints from 1 again, and the table's snapshot
 * summaries and published-checkpoint property still name the old ledger's checkpoints of the same numbers. So the
 * evidence names the ledger too: its incarnation id, created once by the ledger before its first swap, is in each
 * snapshot's summary ({@link SUMMARY_LEDGER}), in a second table property beside the published-checkpoint one
 * ({@link ledgerPropertyOf}) and in the snapshot id's derivation ({@link checkpointSnapshotId}).
 *
 * Evidence naming no ledger was written before incarnations existed. It is this ledger's only when the ledger
 * adopted it ({@link LedgerRef.adoptsUnnamed}): its incarnation was created over a published mark already there,
 * a ledger that published to the table before. A new ledger's incarnation is created with the mark, so evidence
 * naming no ledger, or another one, is not its.
 */
import { snapshotIdOf, type TableMetadata } from './table-metadata.ts';

export const SUMMARY_LEDGER = 'eos.ledger';

/** A ledger incarnation, as the published mark holds it. */
export interface LedgerRef {
  readonly id: string;
  /** Evidence naming no ledger is this ledger's (it published to the table before incarnations). */
  readonly adoptsUnnamed: boolean;
}

/** Whose checkpoints: the pipeline's, of one ledger when `ledger` is given (else of any, as before incarnations). */
export interface CheckpointIdentity {
  readonly pipelineId: string;
  readonly ledger?: LedgerRef;
}

/** `pipeline` alone, or an identity, as an identity. */
export function identityOf(who: string | CheckpointIdentity): CheckpointIdentity {
  return typeof who === 'string' ? { pipelineId: who } : who;
}

/** The property naming the ledger whose checkpoint `checkpointProperty` names; set in the same swap. */
export function ledgerPropertyOf(checkpointProperty: string): string {
  return `${checkpointProperty}.ledger`;
}

/** Whether evidence naming ledger `named` (undefined: none) is `identity`'s. */
export function isOwnLedger(identity: CheckpointIdentity, named: string | undefined): boolean {
  const { ledger } = identity;
  if (ledger === undefined) return true;
  return named === undefined ? ledger.adoptsUnnamed : named === ledger.id;
}

/**
 * The snapshot id of checkpoint `checkpointId` of `identity`: a function of the pipeline, the ledger incarnation
 * and the checkpoint, so every attempt names the same one and two ledgers never name the same one.
 */
export function checkpointSnapshotId(identity: CheckpointIdentity, checkpointId: number): bigint {
  const { pipelineId, ledger } = identity;
  return ledger === undefined
    ? snapshotIdOf(pipelineId, checkpointId)
    : snapshotIdOf(`${pipelineId}\0ledger\0${ledger.id}`, checkpointId);
}

/** The ids the snapshot of checkpoint `checkpointId` of `identity` may have: the ledger's, and the unnamed one. */
export function checkpointSnapshotIds(identity: CheckpointIdentity, checkpointId: number): bigint[] {
  const own = checkpointSnapshotId(identity, checkpointId);
  return identity.ledger?.adoptsUnnamed ? [own, snapshotIdOf(identity.pipelineId, checkpointId)] : [own];
}

/** The ledgers other than `identity`'s the table's property and listed summaries name for the pipeline. */
export function otherLedgers(
  metadata: TableMetadata,
  identity: CheckpointIdentity,
  checkpointProperty: string,
  summaryPipeline: (summary: Readonly<Record<string, string>>) => boolean,
): string[] {
  const named = new Set<string>();
  const note = (ledger: string | undefined) => {
    if (!isOwnLedger(identity, ledger)) named.add(ledger ?? '(none)');
  };
  if (metadata.properties[checkpointProperty] !== undefined) {
    note(metadata.properties[ledgerPropertyOf(checkpointProperty)]);
  }
  for (const snapshot of metadata.snapshots) {
    if (summaryPipeline(snapshot.summary)) note(snapshot.summary[SUMMARY_LEDGER]);
  }
  return [...named];
}

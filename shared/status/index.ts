export {
  type AbortedAttempt,
  type CheckpointView,
  type HeadView,
  isCommitted,
  isInFlight,
} from './checkpoint-view.ts';
export { type AuthenticationModes, type ClusterStatus, readClusterStatus } from './cluster-status.ts';
export { formatStatus, type PipelineStatus, statusToJson } from './format.ts';
export { type LedgerStatus, type PartitionStatus, readLedgerStatus } from './ledger-status.ts';

/**
 * What the benchmark measures for the cost model (`bench/counts.ts`), as shipped in `cli/cost-counts.json`: calls
 * per batch and per checkpoint as fitted terms, the stack's defaults, and the list prices copied with their date.
 * `cost-model.ts` prices them.
 */
import type { Workflow } from '../shared/coordinator/definition.ts';
import type { CheckpointLayout } from './cost-traffic.ts';

/** How a count grows with the size of a batch. */
export interface BatchTerms {
  readonly fixed: number;
  readonly perRecord: number;
}

/** How a count grows with the shape of a checkpoint. */
export interface CheckpointTerms {
  readonly fixed: number;
  readonly perShard: number;
  readonly perPartition: number;
  readonly perStagedFile: number;
  readonly perFinalObject: number;
}

export interface ProcessorCounts {
  /** Calls per batch by operation (`dynamodb:TransactWriteItems`, `s3:PutObject`, …). */
  readonly calls: Record<string, BatchTerms>;
  /** Items written through transactions per batch: fixed, plus one per distinct state key (`perStateKey`). */
  readonly transactionItems: { readonly fixed: number; readonly perStateKey: number };
  /** Write units of single writes (PutItem, UpdateItem, DeleteItem) per batch, by the sizes DynamoDB reported. */
  readonly singleWriteUnits: BatchTerms;
  /** Measured milliseconds per batch on the local parts (what Lambda would bill is assumed to follow it). */
  readonly ms: BatchTerms;
  /**
   * The same, measured with a transform that keeps no state: its chunks write the fence alone (one UpdateItem,
   * entries inline: `shared/ledger/inline-entries.ts`), which the fit with state keys cannot extrapolate to.
   */
  readonly stateless: StatelessProcessorCounts;
}

export interface StatelessProcessorCounts {
  readonly calls: Record<string, BatchTerms>;
  readonly transactionItems: BatchTerms;
  readonly singleWriteUnits: BatchTerms;
  readonly ms: BatchTerms;
  /**
   * DynamoDB write units of a batch of the larger measured size by its position after a checkpoint's cleanup
   * (index 0: the first batch after it), all of its writes by their items' sizes, up to and with the chunk that
   * moves the fence's inline entries into items (the positions after it repeat these). When present they price the
   * batch's units instead of `singleWriteUnits` and `transactionItems`, which were measured with no checkpoint.
   */
  readonly writeUnitsAfterCleanup?: readonly number[];
}

/** Exactly-once stages into the ledger, which each checkpoint's cleanup empties: its stateless units by position. */
export interface ExactlyOnceProcessorCounts extends ProcessorCounts {
  readonly stateless: StatelessProcessorCounts & { readonly writeUnitsAfterCleanup: readonly number[] };
}

export interface CheckpointCounts {
  readonly calls: Record<string, CheckpointTerms>;
  readonly transactionItems: CheckpointTerms;
  /** Writes sent as PartiQL batch statements (one write unit each per KB, not a transaction's two). */
  readonly statementWrites: CheckpointTerms;
  /** Write units of single writes (PutItem, UpdateItem, DeleteItem), by the sizes DynamoDB reported. */
  readonly singleWriteUnits: CheckpointTerms;
  readonly lambdaInvocations: CheckpointTerms;
  /** State transitions, what a Standard workflow bills: states entered (inside Map iterations too) and retries. */
  readonly transitions: CheckpointTerms;
  /** Step Functions executions a checkpoint takes (one, unless an Express one hands off): what Express bills. */
  readonly executions: CheckpointTerms;
  /** Measured milliseconds per coordinator invocation (the checkpoints' wall time over their invocations). */
  readonly msPerInvocation: number;
}

export interface Prices {
  readonly region: string;
  readonly asOf: string;
  readonly dynamodb: {
    readonly writeRequestUnitPerMillion: number;
    readonly readRequestUnitPerMillion: number;
  };
  readonly s3: { readonly putCopyPostListPer1000: number; readonly getHeadPer1000: number };
  readonly stepFunctions: {
    readonly standardTransitionPer1000: number;
    readonly expressRequestsPerMillion: number;
    readonly expressGbSecond: number;
    /** Express bills the memory an execution uses in chunks of this size; a checkpoint's state needs one. */
    readonly expressMemoryChunkMb: number;
    /** Express bills an execution's duration rounded up to this. */
    readonly expressBillingIncrementMs: number;
  };
  readonly lambda: { readonly arm64GbSecond: number; readonly requestsPerMillion: number };
  readonly cloudWatch: {
    readonly alarmStandardPerMonth: number;
    readonly dashboardPerMonth: number;
    readonly customMetricPerMonth: number;
  };
  readonly firehose: { readonly mskSourcePerGb: number; readonly source: string };
  readonly managedFlink: {
    readonly kpuHour: number;
    readonly orchestrationKpus: number;
    readonly assumedBytesPerSecondPerKpu: number;
    readonly source: string;
  };
}

/** What the benchmark measured, as shipped with the package. */
export interface CostCounts extends CheckpointLayout {
  readonly measuredAt: string;
  readonly by: string;
  /** The stack's defaults, read from its configuration. */
  readonly defaults: {
    readonly batchSize: number;
    readonly maxBatchingWindowSeconds: number;
    readonly checkpointIntervalMinutes: number;
    readonly processorMemoryMb: number;
    readonly coordinatorMemoryMb: number;
    readonly monitorMemoryMb: number;
    /** The workflow the schedule starts (`coordinatorWorkflow`); counts measured before it existed: Standard. */
    readonly coordinatorWorkflow?: Workflow;
  };
  /** The benchmark workload's pool of state keys: at most this many distinct keys per batch, by default. */
  readonly stateKeys: number;
  /** At-least-once stages nothing in the ledger and runs no checkpoint: its batches have no cycle. */
  readonly processor: {
    readonly 'exactly-once': ExactlyOnceProcessorCounts;
    readonly 'at-least-once': ProcessorCounts;
  };
  readonly checkpoint: CheckpointCounts;
  /** One monitor run (every checkpoint interval), by operation. */
  readonly monitor: Record<string, number>;
  /** Counted in the synthesized default stack. */
  readonly stack: { readonly alarms: number; readonly dashboards: number; readonly customMetrics: number };
  readonly prices: Prices;
}

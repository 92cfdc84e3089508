/** The options of an `eos local` run, as the command parses them, and what it needs besides them. */
import type { FaultRates } from '../local/faults.ts';
import type { LocalParts } from '../local/parts.ts';
import type { DeliveryGuarantee } from '../shared/config/settings.ts';
import type { LocalOutput } from './local-output.ts';

export interface LocalCommandOptions {
  readonly input?: string;
  readonly records?: number;
  readonly partitions: number;
  /** `--partitions` left at its default with `--input`: the file's partitions decide the count. */
  readonly partitionsFromInput?: boolean;
  /** Flags that set a processor setting: absent, the `EOS_*` variable (or the local default) decides. */
  readonly guarantee?: DeliveryGuarantee;
  readonly transform?: string;
  readonly idempotencyKey?: string;
  /** `--missing-idempotency-key`: what a record without a key becomes (EOS_MISSING_IDEMPOTENCY_KEY). */
  readonly missingIdempotencyKey?: string;
  readonly topic?: string;
  /** Records per partition per event (the mapping's batch size). */
  readonly batchSize?: number;
  readonly failOnDeadLetter?: boolean;
  /** `--format ndjson|parquet`: the output format (EOS_OUTPUT_FORMAT). */
  readonly format?: string;
  /** `--partition-by none|day|hour`: the final objects' time folders (EOS_TIME_PARTITIONING). */
  readonly partitionBy?: string;
  /** `--time-field`: the output column whose time files a row (EOS_TIME_FIELD). */
  readonly timeField?: string;
  /** `--final-objects merged|partition`: how NDJSON final objects are cut (EOS_FINAL_OBJECTS). */
  readonly finalObjects?: string;
  /** `--output files|iceberg`: the committed objects, or those and an Iceberg table over them (default files). */
  readonly output?: LocalOutput;
  readonly faults: FaultRates;
  readonly seed: number;
  readonly checkpointInterval: number;
  readonly export?: string;
  readonly report?: string;
  /** An existing AWS-compatible endpoint (LocalStack) for DynamoDB and S3 both, instead of starting the parts. */
  readonly endpoint?: string;
  /** Separate existing endpoints (DynamoDB Local and an S3 server started apart); each wins over --endpoint. */
  readonly dynamodbEndpoint?: string;
  readonly s3Endpoint?: string;
  /** An operations scenario: `recreate-topic`, `redrive` or `replay`. */
  readonly scenario?: LocalScenario;
  /** Run even when the table or bucket already holds the pipeline (else exit 2, see `local/in-use.ts`). */
  readonly reuse?: boolean;
}

/** The operations scenarios `eos local --scenario` runs (docs/local.md). */
export const LOCAL_SCENARIOS = ['recreate-topic', 'redrive', 'replay'] as const;
export type LocalScenario = (typeof LOCAL_SCENARIOS)[number];

/** What `eos local` needs besides its options; tests replace the parts and the output. */
export interface LocalDependencies {
  /** Starts (or reuses) the local parts; default {@link startLocalParts}. */
  readonly startParts?: () => Promise<Pick<LocalParts, 'env' | 'stop'>>;
  readonly write?: (text: string) => void;
  /** Where errors go (stderr by default). */
  readonly writeError?: (text: string) => void;
  readonly progress?: boolean;
  /** Where the `EOS_*` variables come from; default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * `eos replay`'s flags: the parsers of its values, and which flags go together (planning, switching, the Athena
 * view), checked before anything runs.
 */
import { InvalidArgumentError } from 'commander';
import { type KafkaAuth, parseTimestamp } from '../shared/kafka/offsets-by-time.ts';
import type { OperatorEnvironment } from './environment.ts';
import { integer } from './options.ts';

/** `0=120,1=340`: a start offset per partition, each partition once. */
export function partitionOffsets(value: string): Map<number, number> {
  const partition = integer(0, 2_147_483_647);
  const offset = integer(0);
  const map = new Map<number, number>();
  for (const part of value.split(',')) {
    const [p, o, ...rest] = part.trim().split('=');
    if (p === undefined || o === undefined || rest.length > 0) {
      throw new InvalidArgumentError('expected <partition>=<offset>, comma-separated (0=120,1=340)');
    }
    const key = partition(p);
    if (map.has(key)) throw new InvalidArgumentError(`partition ${key} is named twice`);
    map.set(key, offset(o));
  }
  return map;
}

/** `0,1,5`: distinct partition numbers. */
export function partitionList(value: string): number[] {
  const parse = integer(0, 2_147_483_647);
  const list = value.split(',').map((part) => parse(part.trim()));
  if (new Set(list).size !== list.length) throw new InvalidArgumentError('a partition is named twice');
  return list;
}

/** `--from-timestamp` and its kin: a time as `parseTimestamp` reads it, or a usage error. */
export function timestamp(value: string): number {
  try {
    return parseTimestamp(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

/** The flags as commander parses them. */
export interface ReplayFlags {
  table?: string;
  pipeline?: string;
  topic?: string;
  fromOffset?: number;
  fromOffsets?: Map<number, number>;
  toOffset?: number;
  fromTimestamp?: number;
  toTimestamp?: number;
  clusterArn?: string;
  bootstrapServers?: string[];
  kafkaAuth?: KafkaAuth;
  partitions?: number[];
  switch?: number;
  athenaView?: boolean;
  bucket?: string;
  database?: string;
  athenaTable?: string;
  view?: string;
  json: boolean;
  endpoint?: string;
}

/** `--athena-view` and its flags: alone, with the bucket. */
export function checkViewOptions(raw: ReplayFlags, environment: OperatorEnvironment): void {
  const viewFlags = [raw.database, raw.athenaTable, raw.view];
  if (raw.athenaView !== true) {
    if (raw.bucket !== undefined || viewFlags.some((flag) => flag !== undefined)) {
      throw new InvalidArgumentError(
        '--bucket, --database, --athena-table and --view go with --athena-view only',
      );
    }
    return;
  }
  if (planFlagsGiven(raw) || raw.switch !== undefined) {
    throw new InvalidArgumentError('--athena-view does not go with planning a replay or --switch');
  }
  environment.requiredBucket(raw.bucket || undefined);
  for (const name of viewFlags) {
    if (name !== undefined && !/^[A-Za-z0-9_]{1,255}$/.test(name)) {
      throw new InvalidArgumentError(`${JSON.stringify(name)} is not a Glue name (letters, digits, _)`);
    }
  }
}

/** Whether any flag that plans a replay is given. */
function planFlagsGiven(raw: ReplayFlags): boolean {
  return [
    raw.topic,
    raw.fromOffset,
    raw.fromOffsets,
    raw.toOffset,
    raw.fromTimestamp,
    raw.toTimestamp,
    raw.clusterArn,
    raw.bootstrapServers,
    raw.kafkaAuth,
    raw.partitions,
  ].some((flag) => flag !== undefined);
}

/** What a plan's options must be, before anything runs. */
export function checkPlanOptions(raw: ReplayFlags, offsetsGiven: boolean): void {
  const planning = planFlagsGiven(raw);
  if (planning && raw.switch !== undefined) {
    throw new InvalidArgumentError('--switch does not go with the flags that plan a replay');
  }
  if (!planning) return;
  const starts = [raw.fromOffset, raw.fromOffsets, raw.fromTimestamp].filter((s) => s !== undefined);
  if (raw.topic === undefined || starts.length !== 1) {
    throw new InvalidArgumentError(
      'a replay plan needs --topic and one of --from-offset, --from-offsets, --from-timestamp',
    );
  }
  if (raw.fromTimestamp === undefined) {
    const brokerFlag = [
      ['--to-timestamp', raw.toTimestamp],
      ['--cluster-arn', raw.clusterArn],
      ['--bootstrap-servers', raw.bootstrapServers],
      ['--kafka-auth', raw.kafkaAuth],
    ].find(([, value]) => value !== undefined);
    if (brokerFlag !== undefined) {
      throw new InvalidArgumentError(`${brokerFlag[0]} goes with --from-timestamp only`);
    }
    return;
  }
  if (raw.toOffset !== undefined) {
    throw new InvalidArgumentError('--from-timestamp ends with --to-timestamp, not --to-offset');
  }
  if (raw.toTimestamp !== undefined && raw.toTimestamp <= raw.fromTimestamp) {
    throw new InvalidArgumentError('--to-timestamp must be after --from-timestamp');
  }
  if (offsetsGiven) return;
  if ((raw.clusterArn === undefined) === (raw.bootstrapServers === undefined)) {
    throw new InvalidArgumentError(
      '--from-timestamp asks the brokers: give one of --cluster-arn, --bootstrap-servers',
    );
  }
}

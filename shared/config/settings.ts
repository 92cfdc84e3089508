/**
 * Pipeline settings: one schema, documented defaults, unknown keys rejected, errors that name the setting.
 *
 * In Lambda the settings come from environment variables (`EOS_*`, see {@link ENV_NAMES}); in tests and the local
 * runner they are passed as an object. Both go through {@link parseSettings}.
 */

import { z } from 'zod';
import { InvalidSettingError } from '../errors.ts';
import { isValidTopicName } from '../kafka/event.ts';
import { COLUMN_TYPES, type ColumnDefinition } from '../transforms/api.ts';
import { DEFAULT_PIPELINE_ID } from './pipeline-id.ts';

/** How committed objects are foldered by record time (`sink/time-partitions.ts` names the folders). */
export const TIME_PARTITIONINGS = ['none', 'day', 'hour'] as const;
export type TimePartitioning = (typeof TIME_PARTITIONINGS)[number];

export const DELIVERY_GUARANTEES = ['exactly-once', 'at-least-once', 'none'] as const;
/** As Flink's DeliveryGuarantee: EXACTLY_ONCE, AT_LEAST_ONCE, NONE. */
export type DeliveryGuarantee = (typeof DELIVERY_GUARANTEES)[number];

/**
 * Where a record's business idempotency key comes from: a header's exact bytes, a field of the JSON value, the
 * key the transform returns (`idempotencyKey` in its result), or nowhere (offset dedupe only).
 */
export type IdempotencyKeySource =
  | { readonly kind: 'header'; readonly name: string }
  | { readonly kind: 'json'; readonly field: string }
  | { readonly kind: 'transform' }
  | { readonly kind: 'none' };

const SEVEN_DAYS_S = 7 * 24 * 3600;
/** The shortest idempotency TTL a setting may name: far above any invocation's duration. */
export const MIN_IDEMPOTENCY_TTL_SECONDS = 86_400;

/** `header:<name>`, `json:<field>`, `transform` or `none`. */
export function parseIdempotencyKeySource(text: string): IdempotencyKeySource {
  if (text === 'none') return { kind: 'none' };
  if (text === 'transform') return { kind: 'transform' };
  const match = /^(header|json):(.+)$/.exec(text);
  if (!match) {
    throw new Error(`expected "header:<name>", "json:<field>", "transform" or "none", got "${text}"`);
  }
  return match[1] === 'header' ? { kind: 'header', name: match[2]! } : { kind: 'json', field: match[2]! };
}

/** The inverse of {@link parseIdempotencyKeySource}: the setting's text. */
export function formatIdempotencyKeySource(source: IdempotencyKeySource): string {
  switch (source.kind) {
    case 'header':
      return `header:${source.name}`;
    case 'json':
      return `json:${source.field}`;
    default:
      return source.kind;
  }
}

/**
 * What a record becomes when the idempotency key source finds nothing in it (a missing header or JSON field, a
 * transform that returns no key): `dead-letter` (default) writes it to the dead-letter stream with the reason, so a
 * key source that names the wrong field cannot pass silently; `offset-only` processes it with offset dedupe only.
 * Either way it is counted (`missingKeys` in the batch report, metric `IdempotencyKeysMissing`).
 */
export const MISSING_IDEMPOTENCY_KEY = ['dead-letter', 'offset-only'] as const;
export type MissingIdempotencyKey = (typeof MISSING_IDEMPOTENCY_KEY)[number];

/**
 * How a checkpoint's NDJSON final objects are cut (output without time folders, and dead letters): `merged`, a few
 * objects a shard holding its partitions' ranges as slices the manifest lists; `partition`, one object a partition
 * and stream (`sink/layout.ts`). Re-encoded objects (Parquet, time folders) are always per partition.
 */
export const FINAL_OBJECT_LAYOUTS = ['merged', 'partition'] as const;
export type FinalObjectLayout = (typeof FINAL_OBJECT_LAYOUTS)[number];

export const OUTPUT_FORMATS = ['ndjson', 'parquet'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/**
 * The catalog of the Iceberg table committed checkpoints are published to: the AWS Glue Data Catalog, AWS S3
 * Tables, or a file catalog in the sink bucket itself (`shared/iceberg/*-catalog.ts`).
 */
export const ICEBERG_CATALOGS = ['glue', 's3tables', 'file'] as const;
export type IcebergCatalogKind = (typeof ICEBERG_CATALOGS)[number];

/** How the Iceberg table is partitioned: by the output's time folders, or not at all (`publish/target.ts`). */
export const ICEBERG_PARTITIONINGS = ['time-folders', 'none'] as const;

/** Glue database and table names as Athena can name them: lower-case letters, digits and underscores. */
const glueName = z.string().regex(/^[a-z0-9_]{1,255}$/, 'lower-case letters, digits and underscores');

/** A key prefix in the sink bucket: no leading or trailing slash, no empty or dot segment. */
const tablePrefix = z
  .string()
  .regex(
    /^(?!.*(^|\/)\.{0,2}(\/|$))[A-Za-z0-9!_.*'()=-]+(\/[A-Za-z0-9!_.*'()=-]+)*$/,
    'a key prefix in the sink bucket, like <pipelineId>/iceberg/output (no leading or trailing slash)',
  );

const columnDefinition = z
  .object({
    name: z.string().min(1),
    type: z.enum(COLUMN_TYPES),
    nullable: z.boolean(),
  })
  .strict();

/**
 * The transform's output columns in normal form (`ColumnDefinition[]`, as `defineTransform` builds them), given as
 * JSON text (the Lambda environment) or as the array itself. Names must be unique and must not be `source`.
 */
const outputColumns = z
  .union([z.string(), z.array(z.unknown())])
  .transform((value, ctx): ColumnDefinition[] => {
    let parsed: unknown = value;
    if (typeof value === 'string') {
      try {
        parsed = JSON.parse(value);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'not JSON (expected [{"name","type","nullable"}, …])' });
        return z.NEVER;
      }
    }
    const columns = z.array(columnDefinition).min(1).safeParse(parsed);
    if (!columns.success) {
      const issue = columns.error.issues[0]!;
      ctx.addIssue({ code: 'custom', message: `column ${issue.path.join('.')}: ${issue.message}` });
      return z.NEVER;
    }
    const names = columns.data.map((column) => column.name);
    const clash = names.find((name, index) => name === 'source' || names.indexOf(name) !== index);
    if (clash !== undefined) {
      ctx.addIssue({ code: 'custom', message: `column "${clash}" is reserved or declared twice` });
      return z.NEVER;
    }
    return columns.data;
  });

export { DEFAULT_PIPELINE_ID } from './pipeline-id.ts';

const pipelineId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lower-case letters, digits and dashes, at most 63 characters');

export const settingsSchema = z
  .object({
    /** Names this pipeline in every ledger key and S3 prefix: several pipelines can share a table and bucket. */
    pipelineId: pipelineId.default(DEFAULT_PIPELINE_ID),
    /** The DynamoDB table holding fences, staged-file entries, claims, keyed state and checkpoints. */
    ledgerTable: z.string().min(3).max(255),
    /** The S3 bucket of the file sink. */
    bucket: z.string().min(3).max(63),
    deliveryGuarantee: z.enum(DELIVERY_GUARANTEES).default('exactly-once'),
    /**
     * Business idempotency key: `header:<name>` (default `header:idempotency-key`), `json:<field>` (a field of the
     * JSON value), `transform` (the `idempotencyKey` the transform returns) or `none`.
     */
    idempotencyKey: z
      .string()
      .default('header:idempotency-key')
      .transform((text, ctx) => {
        try {
          return parseIdempotencyKeySource(text);
        } catch (error) {
          ctx.addIssue({ code: 'custom', message: (error as Error).message });
          return z.NEVER;
        }
      }),
    /**
     * A record in which the idempotency key source finds nothing: `dead-letter` (default) or `offset-only` (offset
     * dedupe only); counted either way. No effect with `idempotencyKey: none`.
     */
    missingIdempotencyKey: z.enum(MISSING_IDEMPOTENCY_KEY).default('dead-letter'),
    /**
     * How idempotency claims are written: `ahead` (default) as batches of conditional inserts naming their claimant,
     * before the staging transaction (P1's sanctioned shortcut, docs/architecture.md: one small transaction per
     * batch instead of one 100-item transaction per ~95 records); `in-transaction` inside the staging transactions.
     */
    claimWrite: z.enum(['ahead', 'in-transaction']).default('ahead'),
    /**
     * Where idempotency keys are remembered: `global` (default) as one claim item per key, so duplicates are caught
     * across partitions (one conditional write per keyed record); `partition` in a window of recent keys per Kafka
     * partition, written in the partition's staging transaction (no extra call per batch), for keys that are the
     * Kafka message key or otherwise never cross partitions.
     */
    idempotencyScope: z.enum(['global', 'partition']).default('global'),
    /**
     * `partition` scope: most keys a partition's window remembers (the window is the TTL or the last this many
     * keys, whichever is shorter). In buckets of 1,000 keys, 16 bytes each (26 bytes of processor memory per key
     * of a cached window).
     */
    idempotencyWindowKeys: z.coerce.number().int().min(1_000).max(500_000).default(100_000),
    /** How long a claimed idempotency key blocks duplicates (seconds). */
    idempotencyTtlSeconds: z.coerce
      .number()
      .int()
      // Far above any invocation: a claim written ahead must not expire before its transaction (P1).
      .min(MIN_IDEMPOTENCY_TTL_SECONDS, "at least one day (86400 s), far above any invocation's duration")
      .default(SEVEN_DAYS_S),
    /** Gzip staged and final NDJSON objects. */
    gzip: z
      .union([z.boolean(), z.enum(['true', 'false'])])
      .default(true)
      .transform((value) => value === true || value === 'true'),
    /** Final objects of the `output` stream: `ndjson` (gzip per `gzip`) or `parquet`; dead letters stay NDJSON. */
    outputFormat: z.enum(OUTPUT_FORMATS).default('ndjson'),
    /** Hive-style time folders of final objects by record time, UTC: `none`, `day` (`dt=`), `hour` (`dt=/hour=`). */
    timePartitioning: z.enum(TIME_PARTITIONINGS).default('none'),
    /**
     * NDJSON final objects without time folders: `merged` (a few a checkpoint's shard, each partition's range a
     * slice of one; a checkpoint pays a PUT and a COPY an object, not a partition) or `partition` (one a
     * partition, at `topic=<t>/partition=<p>/`, for readers that list those folders).
     */
    finalObjects: z.enum(FINAL_OBJECT_LAYOUTS).default('merged'),
    /**
     * The output column whose value is a row's record time (a `timestamp` or `long` column, milliseconds); unset:
     * the Kafka timestamp. A row whose value is null falls back to the Kafka timestamp.
     */
    timeField: z.string().min(1).optional(),
    /** The transform's output columns (normal form, JSON): what the coordinator encodes Parquet with. */
    outputColumns: outputColumns.optional(),
    /** The name of the transform in the registry (`shared/transforms`). */
    transform: z.string().default('orders'),
    /** Items per DynamoDB transaction; DynamoDB's limit is 100. */
    maxTransactionItems: z.coerce.number().int().min(8).max(100).default(100),
    /** A checkpoint's lease: an execution that finds an older in-flight checkpoint recovers it (seconds). */
    checkpointLeaseSeconds: z.coerce.number().int().positive().default(600),
    /**
     * The event source this processor accepts (the MSK cluster's or the self-managed source's ARN as it appears in
     * `eventSourceArn`); unset accepts any (local runs). An event from another source is rejected before any effect.
     */
    eventSourceArn: z
      .string()
      .regex(/^arn:[a-z0-9-]+:[a-z0-9-]+:/, 'an ARN (arn:<partition>:<service>:…)')
      .optional(),
    /**
     * The self-managed Kafka cluster this processor accepts: its bootstrap servers (comma-separated `host:port`), as
     * the event source mapping carries them in each event's `bootstrapServers`; unset accepts any. Order does not
     * matter. With `eventSourceArn` also set, an event must match one of the two.
     */
    bootstrapServers: z
      .string()
      .regex(/^[A-Za-z0-9.-]+:\d{1,5}(,[A-Za-z0-9.-]+:\d{1,5})*$/, 'comma-separated host:port entries')
      .optional(),
    /** Comma-separated topics this processor accepts; unset accepts any. A record of another topic rejects its event. */
    topics: z
      .union([z.string(), z.array(z.string())])
      .optional()
      .transform((value, ctx) => {
        if (value === undefined) return undefined;
        const topics = (typeof value === 'string' ? value.split(',') : value)
          .map((topic) => topic.trim())
          .filter(Boolean);
        // An empty list would reject every event; a name Kafka would refuse is a typo.
        const bad = topics.find((topic) => !isValidTopicName(topic));
        if (topics.length === 0 || bad !== undefined) {
          ctx.addIssue({
            code: 'custom',
            message:
              bad === undefined
                ? 'at least one topic'
                : `"${bad}" is not a Kafka topic name (1-249 of [a-zA-Z0-9._-], not "." or "..")`,
          });
          return z.NEVER;
        }
        return topics;
      }),
    /**
     * How far above a partition's fence a batch may start before the `FenceJumps` alarm fires (offsets; Kafka
     * offsets have gaps after compaction and transactions, so a jump is reported, not refused).
     */
    maxFenceJump: z.coerce.number().int().positive().default(1_000_000),
    /** Staged objects no ledger entry references are deleted once older than this; must exceed the processor's timeout (seconds). */
    orphanGraceSeconds: z.coerce.number().int().positive().default(3600),
    /**
     * The Iceberg table committed checkpoints are published to: its catalog, `glue`, `s3tables` or `file`; unset,
     * no table. Needs `outputFormat` parquet: the table's data files are the Parquet output objects themselves.
     */
    icebergCatalog: z.enum(ICEBERG_CATALOGS).optional(),
    /**
     * `glue` and `file`: the table's key prefix in the sink bucket (its metadata goes under `<prefix>/metadata/`).
     * Unset: `<pipelineId>/iceberg/output`.
     */
    icebergTablePrefix: tablePrefix.optional(),
    /** `glue`: the Glue database of the table. */
    icebergDatabase: glueName.optional(),
    /** `glue` and `s3tables`: the table's name. */
    icebergTable: glueName.optional(),
    /** `s3tables`: the table bucket's ARN. */
    icebergTableBucketArn: z
      .string()
      .regex(
        /^arn:aws[a-z-]*:s3tables:[a-z0-9-]+:\d{12}:bucket\/[a-z0-9_-]{3,63}$/,
        'arn:aws:s3tables:<region>:<account>:bucket/<name>',
      )
      .optional(),
    /** `s3tables`: the namespace of the table in its table bucket. */
    icebergNamespace: glueName.optional(),
    /** How the table is partitioned: `time-folders` (unset: the output's time folders) or `none`. */
    icebergPartitioning: z.enum(ICEBERG_PARTITIONINGS).optional(),
    /**
     * Set only on the replay mapping's processor (`eos replay`, docs/operations.md): it stages the ranges of this
     * generation's replay plan into the generation's lanes, and nothing else. Unset: the live processor.
     */
    replayGeneration: z.coerce.number().int().min(1).max(999_999_999).optional(),
  })
  .strict();

export type SettingsInput = z.input<typeof settingsSchema>;
export type Settings = z.output<typeof settingsSchema>;

/** The environment variable that carries each setting in Lambda. */
export const ENV_NAMES = {
  pipelineId: 'EOS_PIPELINE_ID',
  ledgerTable: 'EOS_LEDGER_TABLE',
  bucket: 'EOS_BUCKET',
  deliveryGuarantee: 'EOS_DELIVERY_GUARANTEE',
  idempotencyKey: 'EOS_IDEMPOTENCY_KEY',
  missingIdempotencyKey: 'EOS_MISSING_IDEMPOTENCY_KEY',
  claimWrite: 'EOS_CLAIM_WRITE',
  idempotencyScope: 'EOS_IDEMPOTENCY_SCOPE',
  idempotencyWindowKeys: 'EOS_IDEMPOTENCY_WINDOW_KEYS',
  idempotencyTtlSeconds: 'EOS_IDEMPOTENCY_TTL_SECONDS',
  gzip: 'EOS_GZIP',
  outputFormat: 'EOS_OUTPUT_FORMAT',
  timePartitioning: 'EOS_TIME_PARTITIONING',
  finalObjects: 'EOS_FINAL_OBJECTS',
  timeField: 'EOS_TIME_FIELD',
  outputColumns: 'EOS_OUTPUT_COLUMNS',
  transform: 'EOS_TRANSFORM',
  maxTransactionItems: 'EOS_MAX_TRANSACTION_ITEMS',
  checkpointLeaseSeconds: 'EOS_CHECKPOINT_LEASE_SECONDS',
  orphanGraceSeconds: 'EOS_ORPHAN_GRACE_SECONDS',
  eventSourceArn: 'EOS_EVENT_SOURCE_ARN',
  bootstrapServers: 'EOS_BOOTSTRAP_SERVERS',
  topics: 'EOS_TOPICS',
  maxFenceJump: 'EOS_MAX_FENCE_JUMP',
  replayGeneration: 'EOS_REPLAY_GENERATION',
  icebergCatalog: 'EOS_ICEBERG_CATALOG',
  icebergTablePrefix: 'EOS_ICEBERG_TABLE_PREFIX',
  icebergDatabase: 'EOS_ICEBERG_DATABASE',
  icebergTable: 'EOS_ICEBERG_TABLE',
  icebergTableBucketArn: 'EOS_ICEBERG_TABLE_BUCKET_ARN',
  icebergNamespace: 'EOS_ICEBERG_NAMESPACE',
  icebergPartitioning: 'EOS_ICEBERG_PARTITIONING',
} as const satisfies Record<keyof Settings, string>;

/**
 * Validates settings; the error names the first bad setting as `label(key)` (its env var name, for example).
 * `outputChecks: false` leaves the cross-checks of the output settings to the caller ({@link checkOutputSettings}):
 * `eos local` fills `outputColumns` from the transform it loads afterwards.
 */
export function parseSettings(
  input: unknown,
  label: (key: string) => string = (key) => key,
  { outputChecks = true }: { readonly outputChecks?: boolean } = {},
): Settings {
  const result = settingsSchema.safeParse(input);
  if (result.success) {
    if (outputChecks) checkOutputSettings(result.data, label);
    return result.data;
  }
  const issue = result.error.issues[0]!;
  const key =
    issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : String(issue.path[0] ?? '(settings)');
  throw new InvalidSettingError(label(key), issue.message);
}

/**
 * The output settings that only make sense together: Parquet needs the columns (the coordinator, which encodes it,
 * does not load the transform); a time field needs time partitioning and must name a `timestamp` or `long` column.
 */
export function checkOutputSettings(settings: Settings, label: (key: string) => string = (key) => key): void {
  if (settings.outputFormat === 'parquet' && settings.outputColumns === undefined) {
    throw new InvalidSettingError(
      label('outputColumns'),
      "required with outputFormat parquet: the transform's columns in normal form (the stack and eos local set it from the transform)",
    );
  }
  checkIcebergSettings(settings, label);
  if (settings.timeField === undefined) return;
  if (settings.timePartitioning === 'none') {
    throw new InvalidSettingError(label('timeField'), 'only used with timePartitioning day or hour');
  }
  const column = settings.outputColumns?.find((c) => c.name === settings.timeField);
  if (column === undefined || (column.type !== 'timestamp' && column.type !== 'long')) {
    throw new InvalidSettingError(
      label('timeField'),
      `"${settings.timeField}" must name a timestamp or long column of outputColumns`,
    );
  }
}

/** The Iceberg settings each catalog takes: any other one set is a mistake, not a setting silently unused. */
const ICEBERG_FIELDS: Readonly<Record<IcebergCatalogKind, readonly (keyof Settings)[]>> = {
  glue: ['icebergDatabase', 'icebergTable', 'icebergTablePrefix', 'icebergPartitioning'],
  s3tables: ['icebergTableBucketArn', 'icebergNamespace', 'icebergTable', 'icebergPartitioning'],
  file: ['icebergTablePrefix', 'icebergPartitioning'],
};
const ICEBERG_REQUIRED: Readonly<Record<IcebergCatalogKind, readonly (keyof Settings)[]>> = {
  glue: ['icebergDatabase', 'icebergTable'],
  s3tables: ['icebergTableBucketArn', 'icebergNamespace', 'icebergTable'],
  file: [],
};
const ICEBERG_KEYS = [...new Set(Object.values(ICEBERG_FIELDS).flat())];

/**
 * The Iceberg table's settings: only with a catalog and Parquet output (the table's data files are the Parquet
 * output objects as they are), each catalog's own settings given, no other catalog's.
 */
function checkIcebergSettings(settings: Settings, label: (key: string) => string): void {
  const kind = settings.icebergCatalog;
  if (kind === undefined) {
    const stray = ICEBERG_KEYS.find((key) => settings[key] !== undefined);
    if (stray !== undefined) {
      throw new InvalidSettingError(label(stray), `only used with ${label('icebergCatalog')}`);
    }
    return;
  }
  if (settings.outputFormat !== 'parquet') {
    throw new InvalidSettingError(
      label('icebergCatalog'),
      "needs outputFormat parquet: the table's data files are the committed Parquet objects",
    );
  }
  const missing = ICEBERG_REQUIRED[kind].find((key) => settings[key] === undefined);
  if (missing !== undefined) {
    throw new InvalidSettingError(label(missing), `required with ${label('icebergCatalog')} ${kind}`);
  }
  const foreign = ICEBERG_KEYS.find(
    (key) => settings[key] !== undefined && !ICEBERG_FIELDS[kind].includes(key),
  );
  if (foreign !== undefined) {
    throw new InvalidSettingError(label(foreign), `not used with ${label('icebergCatalog')} ${kind}`);
  }
}

/** Settings from `EOS_*` environment variables. Unknown `EOS_*` variables are rejected as typos. */
export function settingsFromEnv(env: NodeJS.ProcessEnv = process.env): Settings {
  const byEnvName = new Map<string, string>(Object.entries(ENV_NAMES).map(([key, name]) => [name, key]));
  const input: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('EOS_') || value === undefined || value === '') continue;
    const key = byEnvName.get(name);
    if (!key)
      throw new InvalidSettingError(name, `unknown setting (known: ${[...byEnvName.keys()].join(', ')})`);
    input[key] = value;
  }
  return parseSettings(input, (key) => ENV_NAMES[key as keyof Settings] ?? key);
}

/** The inverse of {@link settingsFromEnv}: what a Lambda's environment must hold for these settings. */
export function settingsToEnv(settings: SettingsInput): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(settings)) {
    if (value === undefined) continue;
    const name = ENV_NAMES[key as keyof Settings];
    if (!name) throw new InvalidSettingError(key, 'unknown setting');
    env[name] =
      Array.isArray(value) && value.every((item) => typeof item === 'string')
        ? value.join(',')
        : typeof value === 'object'
          ? JSON.stringify(value)
          : String(value);
  }
  return env;
}

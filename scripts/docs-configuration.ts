/**
 * Generates `docs/configuration.md` from the settings definitions, so the page cannot drift from the code:
 * - the pipeline settings (`settingsSchema`, `ENV_NAMES` in `shared/config/settings.ts`): env variable, default;
 * - the deployment settings (`pipelineConfigSchema`, `CONFIG_KEYS` in `infra/config.ts`): CDK context key and
 *   construct prop, default;
 * - the `eos` commands' flags, read from the commander program itself (`cli/eos.ts`).
 *
 * Names, defaults and flags come from the code. The settings' prose lives here, keyed by setting name, because the
 * schemas carry no machine-readable descriptions: `test/docs/generated.test.ts` fails naming any setting that
 * has none (a setting added to a schema without a line here), and any description left for a setting that no
 * longer exists.
 *
 *   npx tsx scripts/docs-configuration.ts          # rewrite docs/configuration.md
 *   npx tsx scripts/docs-configuration.ts --check  # exit 1 when the page is stale
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command, Option } from 'commander';
import type { z } from 'zod';
import {
  CONFIG_KEYS,
  pipelineConfigSchema,
  REPLAY_FIELD_OF_CONTEXT_KEY,
  type ReplayContextKey,
} from '../infra/config.ts';
import {
  ICEBERG_CONTEXT_KEYS,
  ICEBERG_FIELD_OF_CONTEXT_KEY,
  type IcebergContextKey,
} from '../infra/iceberg-context.ts';
import { DURATION_UNITS, PROP_OF_SETTING } from '../infra/prop-names.ts';
import { ENV_NAMES, settingsSchema } from '../shared/config/settings.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const CONFIGURATION_PAGE = join(root, 'docs', 'configuration.md');

/** App-level context keys that are no pipeline setting (`infra/app.ts`). */
const APP_CONTEXT = {
  stackName: {
    default: '`ExactlyOncePipeline-<pipelineId>`',
    meaning: 'The CloudFormation stack name (context only; not a construct prop).',
  },
} as const;

/** Construct props (no settings) the repository's stack also reads from context (`infra/stack.ts`). */
const CONSTRUCT_CONTEXT = {
  eventSourceMapping: {
    default: '`true`',
    meaning:
      'Create the event source mapping from the topic to the processor. `false` deploys without it, to invoke the processor yourself (LocalStack, [localstack.md](localstack.md)) or attach your own mapping.',
  },
  analyticsTable: {
    default: '`false`',
    meaning:
      'Create a Glue table over the committed output (partition projection on its time folders) and an Athena workgroup with its own results bucket. Needs `outputFormat` `parquet` ([output.md](output.md)).',
  },
  operatorRoleArns: {
    prop: 'operatorRoles',
    default: '— (none)',
    meaning:
      "Roles of the stack's account, by ARN, comma-separated, that may run `eos epoch --start-new`, `eos redrive` and `eos replay` ([deploy.md](deploy.md#grants-and-metrics)).",
  },
} as const satisfies Record<string, { prop?: string; default: string; meaning: string }>;

const REPLAY_SECTION = 'deploy.md#replaying-a-range-into-a-new-generation-the-replay-mapping';

/** The `replay` prop's fields the repository's stack reads from context (`infra/config.ts`, `infra/stack.ts`). */
const REPLAY_CONTEXT: Readonly<Record<ReplayContextKey, { default: string; meaning: string }>> = {
  replayGeneration: {
    default: '— (no replay mapping)',
    meaning: `Replay into output generation N (1–999,999,999, the generation \`eos replay\` wrote the plan for): adds a second processor with \`EOS_REPLAY_GENERATION=N\` behind a second event source mapping under consumer group \`<consumerGroupId>-replay-gN\`. Needs \`deliveryGuarantee\` \`exactly-once\`. Remove it and deploy again once the switch is committed ([deploy.md](${REPLAY_SECTION})).`,
  },
  replayStartingPosition: {
    default: '`TRIM_HORIZON`',
    meaning:
      "Where the replay's consumer group starts: `TRIM_HORIZON` or `AT_TIMESTAMP` (with `replayStartingPositionTimestamp`). Only with `replayGeneration`.",
  },
  replayStartingPositionTimestamp: {
    default: '— (unset)',
    meaning:
      'For `replayStartingPosition` `AT_TIMESTAMP`: Unix seconds (or ISO 8601 with a zone) in context, whole Unix seconds in props.',
  },
};

const ICEBERG_SECTION = 'deploy.md#an-iceberg-table';

/** The `iceberg` prop's fields the repository's stack reads from context (`infra/iceberg-context.ts`). */
const ICEBERG_CONTEXT: Readonly<Record<IcebergContextKey, { default: string; meaning: string }>> = {
  icebergCatalog: {
    default: '— (no table)',
    meaning: `Publish each committed checkpoint to an Iceberg table, one snapshot each: \`glue\` (a Glue database and table the stack creates, which Athena queries) or \`file\` (metadata in the sink bucket only); \`s3tables\` is refused. Adds the Publish step and its function. Needs \`outputFormat\` \`parquet\` and exactly-once ([deploy.md](${ICEBERG_SECTION})).`,
  },
  icebergDatabase: {
    default: '`eos_<pipelineId>_iceberg`',
    meaning: '`glue`: the Glue database the stack creates for the table.',
  },
  icebergTable: { default: '`output`', meaning: "`glue`: the table's name." },
  icebergTablePrefix: {
    default: '`<pipelineId>/iceberg/output`',
    meaning:
      "The table's key prefix in the sink bucket (its metadata under `metadata/`); not inside the pipeline's own prefixes.",
  },
  icebergPartitioning: {
    default: '`time-folders`',
    meaning: '`time-folders` (identity partitions on the `dt`/`hour` folders) or `none`.',
  },
};

/** One line of prose per setting, pipeline and deployment alike. Keep it to what the code does. */
export const SETTING_DESCRIPTIONS: Readonly<Record<string, string>> = {
  // Pipeline settings (shared/config/settings.ts)
  pipelineId:
    'Names the pipeline in every ledger key, S3 prefix, alarm and the dashboard, so pipelines can share a table and bucket. Lower-case letters, digits and dashes, at most 63 characters.',
  ledgerTable:
    'The DynamoDB ledger table: offset fences, staged-file entries, idempotency claims, keyed state, checkpoints. The stack sets it.',
  bucket: 'The S3 bucket of the file sink. The stack sets it.',
  deliveryGuarantee:
    '`exactly-once`; `at-least-once` (output written straight to final objects, no fence, no dedupe: duplicates under faults; the performance baseline); `none` (errors swallowed, the batch acknowledged anyway: losses under faults).',
  idempotencyKey:
    "Where a record's business idempotency key comes from: `header:<name>`, `json:<field>` (a field of the JSON value), `transform` (the `idempotencyKey` the transform returns) or `none`.",
  missingIdempotencyKey:
    'A record in which the idempotency key source finds nothing (a missing header or field, a transform returning no key): `dead-letter` writes it to the dead-letter stream with the reason `no idempotency key: <source> …`; `offset-only` processes it with offset dedupe only. Counted either way (`missingKeys`, metric `IdempotencyKeysMissing`).',
  claimWrite:
    'How idempotency claims are written: `ahead` (before the staging transaction, in batches of conditional inserts that name their claimant) or `in-transaction` (inside the staging transactions).',
  idempotencyScope:
    'Where idempotency keys are remembered: `global` (one claim item per key: duplicates caught across partitions, one conditional write per keyed record) or `partition` (a window of recent keys per Kafka partition, written in its staging transaction: no extra call per batch; only for keys that never cross partitions, such as the Kafka message key). See [idempotency scope](architecture.md#idempotency-scope).',
  idempotencyWindowKeys:
    "`partition` scope: most keys one partition's window remembers; the window is the TTL or the last this many keys, whichever is shorter (16 bytes per key, in items of 1,000 keys).",
  idempotencyTtlSeconds:
    'How long a claimed idempotency key blocks duplicates (DynamoDB TTL on the claim). At least one day.',
  gzip: 'Gzip staged and final NDJSON objects.',
  outputFormat:
    "Final objects of the `output` stream: `ndjson` (gzip per `gzip`) or `parquet` (the transform's columns, then the lineage struct `source`; needs `outputColumns`). Dead letters stay NDJSON. See [output.md](output.md).",
  timePartitioning:
    'Hive-style time folders of final objects by record time, UTC: `none` (no time folders: see `finalObjects`), `day` (`dt=YYYY-MM-DD/`) or `hour` (`dt=YYYY-MM-DD/hour=HH/`). Each checkpoint writes at most one file per folder, Kafka partition and stream (a size/row limit splits larger ones).',
  finalObjects:
    'How NDJSON final objects without time folders are cut: `merged`, about one object per checkpoint shard (64 partitions), lane and stream, each partition range a slice the manifest lists (`sliceStart`), so a checkpoint pays a PUT and a COPY per object, not per partition; or `partition`, one object per partition at `topic=<t>/partition=<p>/`, for readers that list those folders. Parquet and time folders are always per partition. See [output.md](output.md#how-many-files-a-day).',
  timeField:
    "The output column (a `timestamp` or `long` column of `outputColumns`, milliseconds) whose value is a row's record time; unset, or null in a row: the record's Kafka timestamp. Needs `timePartitioning`.",
  outputColumns:
    "The transform's output columns in normal form (JSON `[{name, type, nullable}]`), which the coordinator encodes Parquet with (it does not load the transform). The stack and `eos local` set it from the transform.",
  transform:
    'A built-in transform (`orders`, `passthrough`) or your module: `./file.ts#export` in context and `eos local --transform`, `{ entry, exportName }` in props; bundled and checked at synth.',
  maxTransactionItems: 'Items per DynamoDB transaction (8–100; DynamoDB allows 100).',
  checkpointLeaseSeconds:
    'An in-flight checkpoint older than this is recovered by the next execution. Must exceed `coordinatorStepTimeoutSeconds` + 60 s.',
  eventSourceArn:
    'The only event source ARN the processor accepts; an event from another source is rejected before any effect (`EventsRejected`). Unset accepts any (local runs); the stack sets it to the cluster.',
  bootstrapServers:
    "The self-managed Kafka cluster the processor accepts (comma-separated `host:port`, any order), matched against each event's `bootstrapServers`; another is rejected before any effect (`EventsRejected`). Unset accepts any; the stack sets it for a self-managed source.",
  topics:
    'Comma-separated topics the processor accepts; a record of another topic rejects its event (`EventsRejected`). Unset accepts any; the stack sets it to `topic`.',
  maxFenceJump:
    "How far (in offsets) above a partition's fence a batch may start before `FenceJumps` is reported. Reported, not refused: compaction and transactions leave gaps.",
  orphanGraceSeconds:
    'Staged objects no ledger entry references are deleted once older than this. Must exceed `processorTimeoutSeconds`.',
  replayGeneration:
    "Set only on the replay mapping's processor (the stack's `replay` prop sets it): the processor then stages the ranges of this generation's replay plan into the generation's lanes and nothing else ([operations](operations.md#replay-into-a-new-generation)). Unset: the live processor.",
  icebergCatalog:
    "The catalog of the Iceberg table each committed checkpoint is published to as one snapshot: `glue` (the AWS Glue Data Catalog), `s3tables` (AWS S3 Tables; the construct refuses it, see [deploy.md](deploy.md#an-iceberg-table)) or `file` (metadata in the sink bucket itself). Unset: no table. Needs `outputFormat` `parquet` and `deliveryGuarantee` `exactly-once`. Set only on the publish step and the monitor, by the stack's `iceberg` prop.",
  icebergTablePrefix:
    "`glue` and `file`: the table's key prefix in the sink bucket; its metadata goes under `<prefix>/metadata/`, its data files are the committed Parquet objects where they are. Unset: `<pipelineId>/iceberg/output`.",
  icebergDatabase: '`glue`: the Glue database of the table (lower-case letters, digits, `_`).',
  icebergTable: "`glue` and `s3tables`: the table's name (lower-case letters, digits, `_`).",
  icebergTableBucketArn: '`s3tables`: the ARN of the table bucket.',
  icebergNamespace: '`s3tables`: the namespace of the table in its table bucket.',
  icebergPartitioning:
    "How the table is partitioned: `time-folders` (unset: identity partitions on the output's time folders, `dt` and `hour`) or `none`.",
  // Deployment settings (infra/config.ts)
  mskClusterArn: 'The MSK cluster to consume from. Required unless `sandboxCluster` is true.',
  mskVpcId:
    "The imported cluster's VPC (`vpc-…`): the pollers' network-interface permissions are conditioned on it. Required with `mskClusterArn` when there is an event source mapping (synth stops without it). Not with `sandboxCluster`.",
  sandboxCluster:
    'Create an MSK Serverless cluster (IAM auth) in a VPC of its own instead of importing one. Not with `mskClusterArn`.',
  topic: 'The topic to consume.',
  consumerGroupId:
    "The event source mapping's consumer group (default `eos-<pipelineId>`). Cannot change after the mapping is created.",
  batchSize: 'Records per invocation (1–10,000; the 6 MB payload limit also applies).',
  maxBatchingWindowSeconds: 'How long the mapping gathers records before invoking (0–300 s).',
  startingPosition:
    'Where a new consumer group starts: `TRIM_HORIZON`, `LATEST` or `AT_TIMESTAMP` (with `startingPositionTimestamp`).',
  startingPositionTimestamp:
    'For `AT_TIMESTAMP`: ISO 8601 with a zone, or Unix seconds, in context (a `Date` in props).',
  minimumPollers:
    'Provisioned mode: the fewest event pollers (1–200). Unset, with `maximumPollers`: on-demand pollers.',
  maximumPollers: 'Provisioned mode: the most event pollers (1–2,000).',
  processorTimeoutSeconds: "The processor Lambda's timeout (10–900 s).",
  processorMemoryMb: "The processor Lambda's memory (128–10,240 MB).",
  coordinatorStepTimeoutSeconds: 'The timeout of each coordinator step Lambda (10–900 s).',
  coordinatorWorkflow:
    'The Step Functions workflow each scheduled checkpoint runs. `express` bills a request and its duration, a few hundredths of what a Standard workflow bills for the same checkpoints in transitions (docs/benchmark.md), and stops at five minutes, so it hands an expired checkpoint and the attempt after an abort to a Standard workflow of the same definition; its executions are in its own log group. `standard`: every checkpoint on the Standard workflow, with its execution history in the console.',
  checkpointIntervalMinutes:
    'How often a checkpoint is taken and the monitor runs. Committed output is at most about this old.',
  noCommitAlarmIntervals: 'The `NoCommit` alarm fires when staged data has waited this many intervals.',
  offsetLagAlarmThreshold:
    "The `OffsetLagHigh` alarm fires when the event source mapping's `OffsetLag` (records the consumer group has not processed) stays at or above this for 15 minutes.",
  alarmEmail: 'Subscribe this address to the alarm topic.',
  removalPolicy:
    '`retain` keeps table, bucket and logs when the stack is deleted; `destroy` removes them (sandboxes).',
  deletionProtection: 'DynamoDB deletion protection on the ledger table.',
  pointInTimeRecovery: 'DynamoDB point-in-time recovery on the ledger table.',
  encryption:
    '`s3` (SSE-S3) or `kms` (one customer-managed key with rotation for bucket, table and alarm topic). Prepare verifies every staged object by its bytes either way (SHA-256, NDJSON, row count), never by its ETag; promote pins its copy of each candidate to the ETag S3 answered the write of prepare with, which under `kms` is not an MD5 (a re-upload of the same bytes gets another).',
  noncurrentVersionExpirationDays:
    'Noncurrent versions of committed objects (final data, manifests) are deleted after this many days. Staged and coordinator work objects keep theirs 3 days.',
  inProgressExpirationDays:
    'Lifecycle backstop on the in-progress prefix (days). Must exceed twice the longest of the orphan grace period, the lease and the NoCommit window.',
  logRetentionDays:
    'CloudWatch Logs retention of every function (a value CloudWatch accepts: 1, 3, 5, 7, 14, 30, …).',
};

/** The setting names of both schemas. */
export function settingNames(): string[] {
  return [...new Set([...Object.keys(settingsSchema.shape), ...CONFIG_KEYS])];
}

/** Settings with no description here: a schema grew a setting and this file did not. */
export function settingsWithoutDescription(): string[] {
  return settingNames().filter((name) => !SETTING_DESCRIPTIONS[name]);
}

/** Descriptions of settings no schema has any more. */
export function staleDescriptions(): string[] {
  const names = new Set(settingNames());
  return Object.keys(SETTING_DESCRIPTIONS).filter((name) => !names.has(name));
}

type Default =
  | { readonly kind: 'value'; readonly value: unknown }
  | { readonly kind: 'optional' }
  | { readonly kind: 'required' };

/** A zod field's default as the user writes it (before transforms): `.default()` may sit inside a pipe. */
function defaultOf(schema: z.ZodType): Default {
  let current: z.ZodType | undefined = schema;
  while (current) {
    const def = current.def as { type: string; defaultValue?: unknown; in?: z.ZodType };
    if (def.type === 'default') return { kind: 'value', value: def.defaultValue };
    if (def.type === 'optional') return { kind: 'optional' };
    if (def.type !== 'pipe') return { kind: 'required' };
    current = def.in;
  }
  return { kind: 'required' };
}

function showDefault(value: Default, absent: string): string {
  if (value.kind === 'required') return '— (required)';
  if (value.kind === 'optional') return absent;
  return `\`${typeof value.value === 'string' ? value.value : JSON.stringify(value.value)}\``;
}

const ABSENT: Readonly<Record<string, string>> = {
  mskClusterArn: '— (required unless `sandboxCluster`)',
  consumerGroupId: '`eos-<pipelineId>`',
};

function cell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const lines = [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`];
  for (const row of rows) lines.push(`| ${row.map(cell).join(' | ')} |`);
  return lines.join('\n');
}

function description(name: string): string {
  return SETTING_DESCRIPTIONS[name] ?? '**(no description)**';
}

/** How a setting is given: its context key and its construct prop (a `Duration` where the key has a unit). */
function contextAndProp(name: string): string {
  const prop = `\`-c ${name}\` / \`${PROP_OF_SETTING[name] ?? name}\``;
  if (DURATION_UNITS[name] !== undefined) return `${prop} (Duration)`;
  return name === 'logRetentionDays' ? `${prop} (RetentionDays)` : prop;
}

function pipelineSection(): string {
  const contextKeys = new Set<string>(CONFIG_KEYS);
  const rows = Object.entries(settingsSchema.shape).map(([name, schema]) => [
    `\`${name}\``,
    `\`${ENV_NAMES[name as keyof typeof ENV_NAMES]}\``,
    contextKeys.has(name) ? contextAndProp(name) : '— (set by the stack)',
    showDefault(defaultOf(schema as z.ZodType), '— (unset)'),
    description(name),
  ]);
  return table(['setting', 'Lambda environment', 'CDK context / construct prop', 'default', 'meaning'], rows);
}

function deploymentSection(): string {
  const pipelineKeys = new Set(Object.keys(settingsSchema.shape));
  const shape = pipelineConfigSchema.shape as Record<string, z.ZodType>;
  const rows = CONFIG_KEYS.filter((name) => !pipelineKeys.has(name)).map((name) => [
    contextAndProp(name),
    showDefault(defaultOf(shape[name]!), ABSENT[name] ?? '— (unset)'),
    description(name),
  ]);
  for (const [name, prop] of Object.entries(CONSTRUCT_CONTEXT)) {
    const propName = 'prop' in prop ? prop.prop : name;
    rows.push([`\`-c ${name}\` / \`${propName}\``, prop.default, prop.meaning]);
  }
  for (const [name, replay] of Object.entries(REPLAY_CONTEXT))
    rows.push([
      `\`-c ${name}\` / \`replay.${REPLAY_FIELD_OF_CONTEXT_KEY[name as ReplayContextKey]}\``,
      replay.default,
      replay.meaning,
    ]);
  for (const name of ICEBERG_CONTEXT_KEYS)
    rows.push([
      `\`-c ${name}\` / \`iceberg.${ICEBERG_FIELD_OF_CONTEXT_KEY[name]}\``,
      ICEBERG_CONTEXT[name].default,
      ICEBERG_CONTEXT[name].meaning,
    ]);
  for (const [name, app] of Object.entries(APP_CONTEXT))
    rows.push([`\`-c ${name}\``, app.default, app.meaning]);
  return table(['CDK context / construct prop', 'default', 'meaning'], rows);
}

function optionDefault(option: Option): string {
  if (option.defaultValueDescription !== undefined) return `\`${option.defaultValueDescription}\``;
  if (option.defaultValue === undefined || option.defaultValue === false) return '—';
  return `\`${typeof option.defaultValue === 'string' ? option.defaultValue : JSON.stringify(option.defaultValue)}\``;
}

function commandSection(command: Command): string {
  const rows = command.options.map((option) => [
    `\`${option.flags}\``,
    optionDefault(option),
    option.description + (option.argChoices ? ` (${option.argChoices.join(', ')})` : ''),
  ]);
  return [
    `### \`eos ${command.name()}\``,
    '',
    `${command.description()}.`,
    '',
    table(['flag', 'default', 'meaning'], rows),
  ].join('\n');
}

/**
 * The `eos` program as a user without `EOS_*` variables sees it: some flags default to `$EOS_BUCKET` or
 * `$EOS_LEDGER_TABLE`, read when the program is built, and the page must not depend on who generates it.
 */
async function cleanProgram(): Promise<Command> {
  const saved = Object.entries(process.env).filter(([name]) => name.startsWith('EOS_'));
  for (const [name] of saved) delete process.env[name];
  try {
    const { buildProgram } = await import('../cli/eos.ts');
    return buildProgram();
  } finally {
    for (const [name, value] of saved) process.env[name] = value;
  }
}

/** The page as `biome check` wants it (it formats Markdown too), so `npm run lint` and the page agree. */
function formatted(markdown: string): string {
  return execFileSync(
    join(root, 'node_modules', '.bin', 'biome'),
    ['format', '--stdin-file-path=docs/configuration.md'],
    {
      cwd: root,
      input: markdown,
      encoding: 'utf8',
    },
  );
}

export async function renderConfigurationPage(): Promise<string> {
  const program = await cleanProgram();
  return formatted(
    `${[
      '# Configuration',
      '',
      '<!-- Generated by scripts/docs-configuration.ts from shared/config/settings.ts, infra/config.ts and cli/. Do not edit: run `npx tsx scripts/docs-configuration.ts`. -->',
      '',
      'Every setting, where it is set, its default and what it does. [Back to the README](../README.md).',
      '',
      '## Pipeline settings',
      '',
      'The settings the Lambdas read. In Lambda they are `EOS_*` environment variables, set by the stack from its',
      "context or the construct's props; in tests and the local runner they are an object. Unknown `EOS_*`",
      'variables are rejected as typos, and a bad value fails the cold start with an error naming the variable.',
      '',
      pipelineSection(),
      '',
      '## Deployment settings',
      '',
      'The settings that shape the stack (`infra/config.ts`). Each is a CDK context key (`-c key=value` or the',
      "`context` of `cdk.json`) for this repository's app, and a prop of the `ExactlyOncePipeline` construct in your",
      'own app. A missing, malformed or unknown setting stops the synth naming it, for example',
      '`invalid setting -c topic: required but not set`. Cross-checks: `orphanGraceSeconds` > `processorTimeoutSeconds`;',
      '`checkpointLeaseSeconds` > `coordinatorStepTimeoutSeconds` + 60; `inProgressExpirationDays` > twice the',
      'longest of grace period, lease and NoCommit window; exactly one of `mskClusterArn` and `sandboxCluster`.',
      'Where the prop is named differently (marked Duration), it takes a CDK `Duration` for the number of seconds,',
      'minutes or days the context key names (`processorTimeoutSeconds=300` is `processorTimeout: Duration.minutes(5)`);',
      'the construct-only props (`source`, `table`, `bucket`, `encryptionKey`, `outputs`, …) are in [deploy.md](deploy.md).',
      '',
      deploymentSection(),
      '',
      '## Command-line flags',
      '',
      'The `eos` command (`npx eos …` in this repository). AWS credentials, region and endpoints come from the',
      'standard AWS environment (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL_S3`, …).',
      '',
      ...program.commands
        .filter((command) => command.name() !== 'help')
        .flatMap((command) => [commandSection(command), '']),
    ]
      .join('\n')
      .trimEnd()}\n`,
  );
}

async function main(): Promise<void> {
  const missing = settingsWithoutDescription();
  if (missing.length > 0) {
    process.stderr.write(
      `settings without a description in scripts/docs-configuration.ts: ${missing.join(', ')}\n`,
    );
    process.exitCode = 1;
    return;
  }
  const page = await renderConfigurationPage();
  if (process.argv.includes('--check')) {
    const current = readFileSync(CONFIGURATION_PAGE, 'utf8');
    if (current !== page) {
      process.stderr.write('docs/configuration.md is stale: run npx tsx scripts/docs-configuration.ts\n');
      process.exitCode = 1;
    }
    return;
  }
  writeFileSync(CONFIGURATION_PAGE, page);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();

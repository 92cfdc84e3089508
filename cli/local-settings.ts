/**
 * The settings of an `eos local` run: the processor's `EOS_*` variables, read and validated as the Lambda reads
 * them (`parseSettings`, same schema, same unknown-variable check), with `eos local`'s flags on top and local
 * defaults where neither says anything. An error names the flag or the variable the bad value came from.
 *
 * Precedence per setting: flag > `EOS_*` variable > local default > the setting's own default. The local defaults
 * are the table and bucket `eos local` creates in its fresh local parts and a 10 s checkpoint lease (a dead
 * checkpoint's lease blocks the next one; 10 min, the deployed default, would stall a short run). One variable is
 * validated but not applied: `EOS_EVENT_SOURCE_ARN` names a real cluster, and every event of the emulated
 * cluster would be refused by it.
 */

import { OptionError } from '../local/errors.ts';
import {
  checkOutputSettings,
  type DeliveryGuarantee,
  ENV_NAMES,
  parseSettings,
  type Settings,
} from '../shared/config/settings.ts';
import { InvalidSettingError, PipelineError } from '../shared/errors.ts';
import { isValidTopicName } from '../shared/kafka/event.ts';

import { LOCAL_DEFAULT_TOPIC, LOCAL_SETTING_DEFAULTS } from './local-defaults.ts';

export { LOCAL_DEFAULT_TOPIC, LOCAL_SETTING_DEFAULTS };

/** The flags that set a processor setting (each wins over its variable). */
export interface SettingFlags {
  readonly guarantee?: DeliveryGuarantee;
  readonly transform?: string;
  readonly idempotencyKey?: string;
  /** `--missing-idempotency-key dead-letter|offset-only`. */
  readonly missingIdempotencyKey?: string;
  readonly topic?: string;
  /** `--format ndjson|parquet`. */
  readonly format?: string;
  /** `--partition-by none|day|hour`. */
  readonly partitionBy?: string;
  /** `--time-field <column>`. */
  readonly timeField?: string;
  /** `--final-objects merged|partition`. */
  readonly finalObjects?: string;
}

/** Each flag that sets a setting: [setting, flag as written, option property]. */
const SETTING_FLAGS = [
  ['deliveryGuarantee', '--guarantee', 'guarantee'],
  ['transform', '--transform', 'transform'],
  ['idempotencyKey', '--idempotency-key', 'idempotencyKey'],
  ['missingIdempotencyKey', '--missing-idempotency-key', 'missingIdempotencyKey'],
  ['outputFormat', '--format', 'format'],
  ['timePartitioning', '--partition-by', 'partitionBy'],
  ['timeField', '--time-field', 'timeField'],
  ['finalObjects', '--final-objects', 'finalObjects'],
] as const satisfies readonly (readonly [keyof Settings, string, keyof SettingFlags])[];

export interface LocalSettings {
  readonly settings: Settings;
  /** The emulated topic: `--topic`, else the first of `EOS_TOPICS`, else `orders`. */
  readonly topic: string;
  /** Where a setting's value came from, to name it in errors: its flag, its variable, or `the default`. */
  readonly origin: (key: keyof Settings) => string;
}

type SettingKey = keyof Settings;
const KEY_OF_ENV = new Map<string, SettingKey>(
  Object.entries(ENV_NAMES).map(([key, name]) => [name, key as SettingKey]),
);

/** Resolves and validates every setting; throws an error naming the flag or variable at fault. */
export function localSettings(flags: SettingFlags, env: NodeJS.ProcessEnv = process.env): LocalSettings {
  return resolveSettings(flags, env, true);
}

/**
 * {@link localSettings} with `outputColumns` taken from the transform, as the stack takes it at synth: `eos local
 * --format parquet` needs no `EOS_OUTPUT_COLUMNS`. A variable that is set must equal the transform's columns (a
 * run must not encode with other columns than the processor checks rows against).
 */
export async function localSettingsWithColumns(
  flags: SettingFlags,
  env: NodeJS.ProcessEnv = process.env,
): Promise<LocalSettings> {
  const local = resolveSettings(flags, env, false);
  const { loadTransform } = await import('../shared/transforms/load.ts');
  let columns: LocalSettings['settings']['outputColumns'];
  try {
    columns = [...(await loadTransform(local.settings.transform)).definition.columns];
  } catch (error) {
    // As loadLocalTransform words it: a named error as it is, anything the module threw as a failed load.
    const source = local.origin('transform');
    const message =
      error instanceof PipelineError
        ? error.message
        : `${local.settings.transform} failed to load: ${(error as Error).message}`;
    throw new OptionError(source, message, { cause: error });
  }
  const given = local.settings.outputColumns;
  if (given !== undefined && JSON.stringify(given) !== JSON.stringify(columns)) {
    throw new InvalidSettingError(
      local.origin('outputColumns'),
      `differs from the columns of transform ${local.settings.transform}: ${JSON.stringify(columns)}`,
    );
  }
  const settings: Settings = { ...local.settings, outputColumns: columns };
  checkOutputSettings(settings, (key) => local.origin(key as keyof Settings));
  return { ...local, settings };
}

function resolveSettings(flags: SettingFlags, env: NodeJS.ProcessEnv, outputChecks: boolean): LocalSettings {
  const input: Record<string, string> = { ...LOCAL_SETTING_DEFAULTS };
  const origin = new Map<string, string>();
  for (const [name, value] of Object.entries(env)) {
    // As settingsFromEnv: empty counts as unset, and an unknown EOS_* variable is a typo.
    if (!name.startsWith('EOS_') || value === undefined || value === '') continue;
    const key = KEY_OF_ENV.get(name);
    if (!key)
      throw new InvalidSettingError(name, `unknown setting (known: ${[...KEY_OF_ENV.keys()].join(', ')})`);
    input[key] = value;
    origin.set(key, name);
  }
  for (const [key, flag, property] of SETTING_FLAGS) {
    const value = flags[property];
    if (value === undefined) continue;
    input[key] = value;
    origin.set(key, flag);
  }
  const parsed = parseSettings(input, (key) => origin.get(key) ?? ENV_NAMES[key as SettingKey] ?? key, {
    outputChecks,
  });
  // EOS_EVENT_SOURCE_ARN was validated with the rest; it is not applied (see the module comment).
  const settings: Settings = { ...parsed, eventSourceArn: undefined };
  return {
    settings,
    topic: emulatedTopic(flags.topic, settings.topics),
    origin: (key) => origin.get(key) ?? 'the default',
  };
}

function emulatedTopic(flag: string | undefined, topics: readonly string[] | undefined): string {
  if (flag === undefined) return topics?.[0] ?? LOCAL_DEFAULT_TOPIC;
  if (topics !== undefined && !topics.includes(flag)) {
    // The processor would refuse every record of the emulated topic: a run that can only fail.
    throw new OptionError('--topic', `"${flag}" is not among EOS_TOPICS (${topics.join(', ')})`);
  }
  return flag;
}

/** `--topic`'s check, as the processor checks a record's topic. */
export function checkTopicName(topic: string): string {
  if (!isValidTopicName(topic))
    throw new Error(`"${topic}" is not a Kafka topic name (1-249 of [a-zA-Z0-9._-], not "." or "..")`);
  return topic;
}

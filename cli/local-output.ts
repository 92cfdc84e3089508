/**
 * `eos local --output files|iceberg`: where a run's committed output goes. `files` (the default) is the committed
 * objects under `final/` and their manifests; `iceberg` is those and an Iceberg table over them, one snapshot per
 * committed checkpoint (a file catalog in the run's bucket, docs/output.md#iceberg-table).
 *
 * An Iceberg table's data files are the final Parquet objects as they are, so `iceberg` implies Parquet: it is the
 * format when neither `--format` nor `EOS_OUTPUT_FORMAT` names one, and NDJSON named either way is refused. The
 * table is appended once per committed checkpoint, so it needs the exactly-once guarantee (the others commit no
 * checkpoint).
 */
import { OptionError } from '../local/errors.ts';
import type { Settings } from '../shared/config/settings.ts';

export const LOCAL_OUTPUTS = ['files', 'iceberg'] as const;
export type LocalOutput = (typeof LOCAL_OUTPUTS)[number];

/** The `--format` a run resolves its settings with: Parquet for an Iceberg run that names no format. */
export function formatFlagFor(
  output: LocalOutput | undefined,
  format: string | undefined,
  env: NodeJS.ProcessEnv,
): string | undefined {
  if (output !== 'iceberg' || format !== undefined) return format;
  return env.EOS_OUTPUT_FORMAT ? undefined : 'parquet';
}

/**
 * Refuses an Iceberg run its settings cannot give a table; `origin` names where a setting came from (a flag, a
 * variable, or the default).
 */
export function checkOutputFor(
  output: LocalOutput | undefined,
  settings: Settings,
  origin: (key: keyof Settings) => string,
): void {
  if (output !== 'iceberg') return;
  if (settings.outputFormat !== 'parquet') {
    throw new OptionError(
      '--output iceberg',
      `the table's data files are Parquet, but ${origin('outputFormat')} is ${settings.outputFormat} (drop it, or use --format parquet)`,
    );
  }
  if (settings.deliveryGuarantee !== 'exactly-once') {
    throw new OptionError(
      '--output iceberg',
      `the table is appended once per committed checkpoint, which only exactly-once has (${origin('deliveryGuarantee')} is ${settings.deliveryGuarantee})`,
    );
  }
}

/** What `--export` says of an Iceberg run's table, which it does not copy. */
export function tableNotExported(location: string): string {
  return `the Iceberg table ${location} is not exported: its metadata names each data file by its s3:// key in the bucket, so a copy elsewhere would not be that table (the exported Parquet objects hold its rows)`;
}

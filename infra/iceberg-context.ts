/**
 * The `iceberg` prop from CDK context, for the repository's app (`-c icebergCatalog=glue`, …): each key sets one
 * field of the prop. A module free of CDK imports, so the docs generator reads the keys without loading aws-cdk-lib;
 * the construct validates the prop (`iceberg-table.ts`), and the app renames its errors to the keys.
 */
import { InvalidSettingError } from '../shared/errors.ts';

export const ICEBERG_CONTEXT_KEYS = [
  'icebergCatalog',
  'icebergDatabase',
  'icebergTable',
  'icebergTablePrefix',
  'icebergPartitioning',
] as const;
export type IcebergContextKey = (typeof ICEBERG_CONTEXT_KEYS)[number];

/** The `iceberg` field each context key sets. */
export const ICEBERG_FIELD_OF_CONTEXT_KEY = {
  icebergCatalog: 'catalog',
  icebergDatabase: 'databaseName',
  icebergTable: 'tableName',
  icebergTablePrefix: 'tablePrefix',
  icebergPartitioning: 'partitioning',
} as const satisfies Record<IcebergContextKey, string>;

type IcebergField = (typeof ICEBERG_FIELD_OF_CONTEXT_KEY)[IcebergContextKey];

/**
 * The prop's fields from the context keys given (strings, as `-c` passes them); undefined when none is given. A key
 * without `icebergCatalog` is refused rather than ignored.
 */
export function icebergFieldsFromContext(
  input: Partial<Record<IcebergContextKey, unknown>>,
  label: (key: string) => string,
): Partial<Record<IcebergField, string>> | undefined {
  const given = ICEBERG_CONTEXT_KEYS.filter((key) => input[key] !== undefined);
  if (given.length === 0) return undefined;
  if (input.icebergCatalog === undefined) {
    throw new InvalidSettingError(label(given[0]!), `only used with ${label('icebergCatalog')}`);
  }
  const fields: Partial<Record<IcebergField, string>> = {};
  for (const key of given) {
    const value = input[key];
    if (typeof value !== 'string') {
      throw new InvalidSettingError(label(key), `expected text, got ${JSON.stringify(value)}`);
    }
    fields[ICEBERG_FIELD_OF_CONTEXT_KEY[key]] = value;
  }
  return fields;
}

/** An error of the prop (`iceberg.tableName`, `iceberg`) as the context key that set it. */
export function icebergContextError(
  error: InvalidSettingError,
  label: (key: string) => string,
): InvalidSettingError {
  const field = error.setting.replace(/^iceberg\.?/, '');
  const key = ICEBERG_CONTEXT_KEYS.find((k) => ICEBERG_FIELD_OF_CONTEXT_KEY[k] === field) ?? 'icebergCatalog';
  return new InvalidSettingError(
    label(key),
    error.message.slice(`invalid setting ${error.setting}: `.length),
  );
}

/**
 * Output rows checked against a transform's declared schema, per record: one pass over the row's own keys and
 * one over the required columns, with the per-column checks built once when the transform is adapted.
 */
import type { ColumnDefinition, ColumnType } from './api.ts';

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

const ACCEPTS: Readonly<Record<ColumnType, (value: unknown) => boolean>> = {
  string: (value) => typeof value === 'string',
  int: (value) => Number.isInteger(value) && (value as number) >= INT32_MIN && (value as number) <= INT32_MAX,
  long: (value) => Number.isSafeInteger(value),
  double: (value) => typeof value === 'number' && Number.isFinite(value),
  boolean: (value) => typeof value === 'boolean',
  timestamp: (value) => Number.isSafeInteger(value),
  // Anything JSON can hold; what JSON.stringify cannot serialize is caught when the row is sized (evaluate.ts).
  json: (value) => value !== undefined && typeof value !== 'function' && typeof value !== 'symbol',
};

const DESCRIBES: Readonly<Record<ColumnType, string>> = {
  string: 'a string',
  int: 'an integer within the 32-bit signed range',
  long: 'an integer within ±(2^53 - 1)',
  double: 'a finite number',
  boolean: 'a boolean',
  timestamp: 'milliseconds since the epoch, an integer within ±(2^53 - 1)',
  json: 'a JSON value',
};

function shown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value !== 'object' || value === null) return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}

/** Why `row` does not match the schema (naming the column), or undefined when it does. */
export type RowCheck = (row: Readonly<Record<string, unknown>>) => string | undefined;

export function compileRowCheck(columns: readonly ColumnDefinition[]): RowCheck {
  const byName = new Map(columns.map((column) => [column.name, column]));
  const required = columns.filter((column) => !column.nullable).map((column) => column.name);
  return (row) => {
    for (const name of Object.keys(row)) {
      const column = byName.get(name);
      if (column === undefined) return `column "${name}" is not declared in the schema`;
      const value = row[name];
      if (value === null || value === undefined) {
        if (!column.nullable) return `column "${name}" is ${value} but not nullable`;
        continue;
      }
      if (!ACCEPTS[column.type](value)) {
        return `column "${name}" must be ${DESCRIBES[column.type]} (${column.type}), got ${shown(value)}`;
      }
    }
    for (const name of required) {
      if (!Object.hasOwn(row, name)) return `required column "${name}" is missing`;
    }
    return undefined;
  };
}

/**
 * `eos state`: the keyed state a pipeline's transform keeps, read from its ledger table: one state key, or every
 * key starting with a prefix, each field with its value and operation (set, add, min, max, latest and its time).
 * Reads are strongly consistent, so what a committed batch applied is there; `--prefix` scans the table.
 *
 * ```
 * eos state --key 's-1#2026-11-30T09' [--table T] [--pipeline orders] [--json] [--endpoint URL]
 * eos state --prefix 's-1#' [--limit N] [--json]
 * ```
 *
 * Exit codes (cli/failures.ts): 0 (a key with no state says so, and prints `null` under `--json`); 2 for bad
 * usage; 3 when AWS cannot be used (no table, no credentials, the endpoint down).
 */
import { type Command, InvalidArgumentError } from 'commander';
import type { StateListing, StateView } from '../shared/ledger/state-read.ts';
import { operatorEnvironment } from './environment.ts';
import { ENDPOINT_HELP, endpointUrl, integer } from './options.ts';

export interface StateDependencies {
  readonly env?: NodeJS.ProcessEnv;
  /** Where the state goes; default stdout. */
  readonly write?: (text: string) => void;
}

export interface StateOptions {
  readonly table: string;
  readonly pipeline: string;
  /** Exactly one of `key` and `prefix`. */
  readonly key?: string;
  readonly prefix?: string;
  readonly limit?: number;
  readonly json: boolean;
  readonly endpoint?: string;
}

// Restated, not imported from shared/transforms/state-delta.ts: registering the command must load no implementation.
const OPERATION_ORDER = ['set', 'add', 'min', 'max', 'latest'];

/** The item's fields in the order they print: by operation (set, add, min, max, latest), then by name. */
function ordered(view: StateView): StateView {
  const names = Object.keys(view.values).sort(
    (a, b) =>
      OPERATION_ORDER.indexOf(view.operations[a]!) - OPERATION_ORDER.indexOf(view.operations[b]!) ||
      (a < b ? -1 : a > b ? 1 : 0),
  );
  const pick = <T>(from: Record<string, T>) =>
    Object.fromEntries(names.filter((name) => name in from).map((name) => [name, from[name]!]));
  return {
    key: view.key,
    values: pick(view.values),
    operations: pick(view.operations),
    latestAt: pick(view.latestAt),
  };
}

/** One item as text: its key, then a line per field: name, value (JSON), operation. */
export function formatState(view: StateView): string {
  const { values, operations, latestAt } = ordered(view);
  const rows = Object.keys(values).map((name) => ({
    name,
    value: JSON.stringify(values[name]),
    operation: latestAt[name] === undefined ? operations[name]! : `${operations[name]}, at ${latestAt[name]}`,
  }));
  const nameWidth = Math.max(0, ...rows.map((row) => row.name.length));
  const valueWidth = Math.max(0, ...rows.map((row) => row.value.length));
  const lines = rows.map(
    (row) => `  ${row.name.padEnd(nameWidth)}  ${row.value.padEnd(valueWidth)}  ${row.operation}`,
  );
  return `${[view.key, ...lines].join('\n')}\n`;
}

function printed(options: StateOptions, found: StateView | undefined, listing?: StateListing): string {
  if (options.json) {
    const value = listing === undefined ? ((found && ordered(found)) ?? null) : listing.items.map(ordered);
    return `${JSON.stringify(value, null, 2)}\n`;
  }
  if (listing === undefined) {
    return found
      ? formatState(found)
      : `no state item ${JSON.stringify(options.key)} in pipeline ${options.pipeline}\n`;
  }
  if (listing.items.length === 0) {
    return `no state item whose key starts with ${JSON.stringify(options.prefix)} in pipeline ${options.pipeline}\n`;
  }
  return listing.items.map(formatState).join('') + (listing.more ? '(more items: raise --limit)\n' : '');
}

/** Reads and prints the state asked for; resolves to what it found. */
export async function runState(
  options: StateOptions,
  deps: StateDependencies = {},
): Promise<StateView | StateListing | undefined> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients, ledgerDocumentClient }, reads] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/ledger/state-read.ts'),
  ]);
  const clients = createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  try {
    const at = { doc: ledgerDocumentClient(clients.dynamodb), table: options.table };
    if (options.key !== undefined) {
      const found = await reads.readStateItem(at, options.pipeline, options.key);
      write(printed(options, found));
      return found;
    }
    const listing = await reads.listStateItems(at, options.pipeline, options.prefix ?? '', options.limit);
    write(printed(options, undefined, listing));
    return listing;
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
}

interface RawOptions {
  readonly key?: string;
  readonly prefix?: string;
  readonly table?: string;
  readonly pipeline?: string;
  readonly limit?: number;
  readonly json: boolean;
  readonly endpoint?: string;
}

/** Which state: exactly one of `--key` (not empty) and `--prefix` (empty: every key). */
function selection(raw: RawOptions): { key: string } | { prefix: string } {
  if (raw.key !== undefined && raw.prefix !== undefined) {
    throw new InvalidArgumentError('--key and --prefix cannot be combined');
  }
  if (raw.key !== undefined) {
    if (raw.key === '')
      throw new InvalidArgumentError('--key is empty: a state key has at least one character');
    return { key: raw.key };
  }
  if (raw.prefix !== undefined) return { prefix: raw.prefix };
  throw new InvalidArgumentError('one of --key or --prefix is required');
}

export function registerStateCommand(program: Command, deps: StateDependencies = {}): Command {
  return program
    .command('state')
    .description(
      'the keyed state the transform keeps: one key, or every key with a prefix, each field with its operation',
    )
    .option('--key <key>', 'one state key, e.g. "s-1#2026-11-30T09"')
    .option('--prefix <prefix>', 'every state key starting with this ("" for all; scans the table)')
    .option(
      '--table <name>',
      'the ledger table (default: $EOS_LEDGER_TABLE; the stack prints it as an output)',
    )
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--limit <n>', 'with --prefix, print at most this many items', integer(1))
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .action(async (raw: RawOptions) => {
      const environment = operatorEnvironment(deps.env);
      const table = environment.requiredTable(raw.table);
      const which = selection(raw);
      await runState(
        {
          table,
          pipeline: environment.pipelineId(raw.pipeline),
          ...which,
          ...(raw.limit === undefined ? {} : { limit: raw.limit }),
          json: raw.json,
          ...(raw.endpoint ? { endpoint: raw.endpoint } : {}),
        },
        deps,
      );
    });
}

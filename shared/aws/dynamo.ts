/**
 * One way to call DynamoDB: every ledger store sends its commands through {@link send} (or {@link sendConditional}
 * for a write that may lose its condition) and reads partitions with {@link queryPages} / {@link queryAll}, so a
 * failure is classified the same everywhere (`classify.ts`): a transient one becomes a `TransientAwsError` naming
 * the operation (the batch or the step is retried), anything else is thrown as DynamoDB answered it.
 */
import {
  type DynamoDBDocumentClient,
  paginateQuery,
  type QueryCommandInput,
  type ServiceInputTypes,
  type ServiceOutputTypes,
  type TransactWriteCommandInput,
} from '@aws-sdk/lib-dynamodb';
import { MissingResourceError } from '../errors.ts';
import { isConditionFailure, rethrowClassified } from './classify.ts';

declare const documents: DynamoDBDocumentClient;
/** A command the document client sends, typed by its input and output (what `send` of the client accepts). */
type DocumentCommand<I extends ServiceInputTypes, O extends ServiceOutputTypes> = Parameters<
  typeof documents.send<I, O>
>[0];

/** One item of a TransactWriteItems. */
export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/** DynamoDB's limit on the items of one TransactWriteItems. */
export const MAX_TRANSACTION_ITEMS = 100;

/** A document client and the table its commands address. */
export interface TableRef {
  readonly doc: DynamoDBDocumentClient;
  readonly table: string;
}

export interface SendOptions {
  /** A missing table is a `MissingResourceError` naming this table, not DynamoDB's ResourceNotFoundException. */
  readonly missingTable?: string;
  /**
   * Runs first on a failure, with DynamoDB's error: throws the caller's more precise error (a lost condition, a
   * refused item) or returns to let the failure be classified.
   */
  readonly explain?: (error: unknown) => void;
}

/** Runs `run` (DynamoDB calls), classifying what it throws as {@link send} does. */
export async function classified<T>(
  operation: string,
  run: () => Promise<T>,
  options: SendOptions = {},
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    options.explain?.(error);
    if (
      options.missingTable !== undefined &&
      (error as { name?: unknown }).name === 'ResourceNotFoundException'
    ) {
      throw new MissingResourceError(`table ${options.missingTable}`, 'does not exist', { cause: error });
    }
    return rethrowClassified(operation, error);
  }
}

/** Sends one command; a failure is explained, then classified (see the module doc). */
export function send<I extends ServiceInputTypes, O extends ServiceOutputTypes>(
  doc: DynamoDBDocumentClient,
  command: DocumentCommand<I, O>,
  operation: string,
  options?: SendOptions,
): Promise<O> {
  return classified(operation, () => doc.send(command), options);
}

export interface ConditionalOptions extends SendOptions {
  /** Which failures mean the write lost its condition (default: `isConditionFailure`). */
  readonly lost?: (error: unknown) => boolean;
}

/** Sends a conditional write: `undefined` when its condition failed, else as {@link send}. */
export function sendConditional<I extends ServiceInputTypes, O extends ServiceOutputTypes>(
  doc: DynamoDBDocumentClient,
  command: DocumentCommand<I, O>,
  operation: string,
  options: ConditionalOptions = {},
): Promise<O | undefined> {
  const lost = options.lost ?? isConditionFailure;
  return classified<O | undefined>(
    operation,
    () =>
      doc.send(command).catch((error: unknown) => {
        if (lost(error)) return undefined;
        throw error;
      }),
    options,
  );
}

type Item = Record<string, unknown>;

/** The items of a Query, page by page to the last (the SDK's paginator); a failed page is classified. */
export async function* queryPages(
  doc: DynamoDBDocumentClient,
  input: QueryCommandInput,
  operation: string,
): AsyncGenerator<Item[]> {
  const pages = paginateQuery({ client: doc }, { ...input });
  while (true) {
    const page = await classified(operation, () => pages.next());
    if (page.done) return;
    yield page.value.Items ?? [];
  }
}

/** Every item of a Query, all pages read. */
export async function queryAll(
  doc: DynamoDBDocumentClient,
  input: QueryCommandInput,
  operation: string,
): Promise<Item[]> {
  const items: Item[] = [];
  for await (const page of queryPages(doc, input, operation)) items.push(...page);
  return items;
}

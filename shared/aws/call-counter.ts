/**
 * Counts AWS calls by operation through SDK middleware: the benchmark and the tests use it to check the claim
 * of two calls per batch in steady state. {@link ByteCounter}, beside it, counts the S3 object bytes that pass
 * through the caller (the Lambda): bodies written by PutObject/UploadPart and read by GetObject.
 */
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';
import type { AwsClients } from './clients.ts';

type Stack = MiddlewareStack<object, MetadataBearer>;

/** DynamoDB's single-item writes, billed by the written item's size. */
const SINGLE_WRITES = new Set(['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem']);
const TRANSACT_WRITE = 'dynamodb:TransactWriteItems';

type Consumed = { CapacityUnits?: number } | ReadonlyArray<{ CapacityUnits?: number }> | undefined;

/** The capacity units a response reports (a transaction reports one entry per table), or undefined. */
function reportedUnits(consumed: Consumed): number | undefined {
  if (consumed === undefined) return undefined;
  const entries = Array.isArray(consumed)
    ? (consumed as ReadonlyArray<{ CapacityUnits?: number }>)
    : [consumed as { CapacityUnits?: number }];
  const units = entries.map((c) => c.CapacityUnits).filter((u): u is number => typeof u === 'number');
  return units.length > 0 ? units.reduce((a, b) => a + b, 0) : undefined;
}

/**
 * The write units of one TransactWriteItems of `items` items that reported `reported` units. AWS bills 2 units per
 * started KB of each item, 2 · Σ ceil(size_i / 1 KB); DynamoDB Local reports 4 · ceil(Σ size_i / 1 KB) instead (one
 * 100 B item: 4 where AWS bills 2; a 3000 B and a 100 B item: 16 where AWS bills 8). Half of Local's figure is a
 * lower bound of AWS's, since a ceiling of a sum is at most the sum of the ceilings: below it when items' partial
 * KBs would fit in fewer KBs together (two 100 B items: 2, AWS 4), which the 2 units an item AWS bills at least
 * make up for small items. So max(2 · items, reported / 2) is a lower bound, exact for one item with one of under a
 * KB (a spilled staging write of one entry: the fence and the entry's item) and for items of small ones alone.
 */
export function transactionUnitsOf(items: number, reported: number | undefined): number {
  return Math.max(2 * items, (reported ?? 0) / 2);
}

export class CallCounter {
  private readonly counts = new Map<string, number>();
  /** Items written through transactions (each costs 2 write request units per KB). */
  private items = 0;
  /** Writes made by PartiQL batch statements (each costs 1 write request unit per KB, as a single write). */
  private statements = 0;
  /** Write units of single writes (PutItem, UpdateItem, DeleteItem), as DynamoDB reports them: by item size. */
  private singleUnits = 0;
  /** Write units of TransactWriteItems, by the items' sizes ({@link transactionUnitsOf}). */
  private txUnits = 0;
  /** Per operation: calls in flight, when the first of them started, and the time any was in flight. */
  private readonly inFlight = new Map<string, { calls: number; since: number }>();
  private readonly busy = new Map<string, number>();

  /** Adds the counting middleware to both clients (adding it again replaces it). */
  attach(clients: AwsClients): this {
    this.count('dynamodb', clients.dynamodb.middlewareStack as unknown as Stack);
    this.count('s3', clients.s3.middlewareStack as unknown as Stack);
    return this;
  }

  private count(service: string, stack: Stack): void {
    const middleware: InitializeMiddleware<object, MetadataBearer> = (next, context) => async (args) => {
      const operation = `${service}:${String(context.commandName).replace(/Command$/, '')}`;
      this.counts.set(operation, (this.counts.get(operation) ?? 0) + 1);
      this.started(operation);
      try {
        return await this.measure(operation, next, args);
      } finally {
        this.ended(operation);
      }
    };
    // 'initialize' runs once per call, before the SDK's own retries: calls as the code makes them.
    stack.add(middleware, { step: 'initialize', name: 'eosCallCounter', override: true });
  }

  private started(operation: string): void {
    const flight = this.inFlight.get(operation);
    if (flight) flight.calls++;
    else this.inFlight.set(operation, { calls: 1, since: performance.now() });
  }

  private ended(operation: string): void {
    const flight = this.inFlight.get(operation);
    if (!flight || --flight.calls > 0) return;
    this.inFlight.delete(operation);
    this.busy.set(operation, (this.busy.get(operation) ?? 0) + performance.now() - flight.since);
  }

  /** Counts what one call writes, and the write units DynamoDB reports for it. */
  private async measure(
    operation: string,
    next: Parameters<InitializeMiddleware<object, MetadataBearer>>[0],
    args: Parameters<ReturnType<InitializeMiddleware<object, MetadataBearer>>>[0],
  ) {
    const input = args.input as {
      TransactItems?: unknown[];
      Statements?: Array<{ Statement?: string }>;
      ReturnConsumedCapacity?: string;
    };
    if (input.TransactItems) this.items += input.TransactItems.length;
    for (const { Statement = '' } of input.Statements ?? [])
      if (/^\s*(INSERT|UPDATE|DELETE)\b/i.test(Statement)) this.statements++;
    const transaction = operation === TRANSACT_WRITE;
    if (!SINGLE_WRITES.has(operation) && !transaction) return next(args);
    // Asked of DynamoDB, which bills a write by the size of the items it writes (before or after, the larger); a
    // write refused by its condition is billed too: a single write at least one unit, a transaction two an item.
    input.ReturnConsumedCapacity ??= 'TOTAL';
    const items = input.TransactItems?.length ?? 0;
    try {
      const result = await next(args);
      const reported = reportedUnits((result.output as { ConsumedCapacity?: Consumed }).ConsumedCapacity);
      if (transaction) this.txUnits += transactionUnitsOf(items, reported);
      else this.singleUnits += reported ?? 1;
      return result;
    } catch (error) {
      if (transaction) this.txUnits += transactionUnitsOf(items, undefined);
      else this.singleUnits += 1;
      throw error;
    }
  }

  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.counts].sort(([a], [b]) => a.localeCompare(b)));
  }

  total(): number {
    return [...this.counts.values()].reduce((a, b) => a + b, 0);
  }

  transactionItems(): number {
    return this.items;
  }

  /**
   * Write units of the TransactWriteItems calls, by the items' sizes: a lower bound of what AWS bills, from what
   * DynamoDB Local reports ({@link transactionUnitsOf}); 2 an item for a refused transaction.
   */
  transactionUnits(): number {
    return this.txUnits;
  }

  /** Write statements sent in PartiQL batches (BatchExecuteStatement). */
  statementWrites(): number {
    return this.statements;
  }

  /** Write units of the single writes (PutItem, UpdateItem, DeleteItem), by the sizes DynamoDB reported. */
  singleWriteUnits(): number {
    return this.singleUnits;
  }

  /**
   * Milliseconds during which at least one call of each operation was in flight (calls of one operation that
   * overlap count once): how long the caller waited on it, when it waited on nothing else meanwhile.
   */
  busyMs(): Record<string, number> {
    return Object.fromEntries([...this.busy].sort(([a], [b]) => a.localeCompare(b)));
  }

  reset(): void {
    this.busy.clear();
    // A call in flight across a reset counts from the reset on, not from before it.
    const now = performance.now();
    for (const flight of this.inFlight.values()) flight.since = now;
    this.counts.clear();
    this.items = 0;
    this.statements = 0;
    this.singleUnits = 0;
    this.txUnits = 0;
  }
}

/** Operations whose request body is object data sent from the caller. */
const WRITES = new Set(['PutObject', 'UploadPart']);
/** Operations whose response body is object data received by the caller. */
const READS = new Set(['GetObject']);

/** The byte length of a request body, when it is in memory (a stream's is its ContentLength, if given). */
function bodyBytes(body: unknown, contentLength: unknown): number | undefined {
  if (typeof body === 'string') return Buffer.byteLength(body);
  if (ArrayBuffer.isView(body)) return body.byteLength;
  if (body instanceof ArrayBuffer) return body.byteLength;
  return typeof contentLength === 'number' ? contentLength : undefined;
}

/** One counted call, kept when the counter was made with `{ keepCalls: true }`. */
export interface CountedCall {
  readonly operation: string;
  readonly bucket: string;
  readonly key: string;
  readonly bytes: number;
  readonly direction: 'read' | 'written';
}

export interface ByteCounts {
  /** Object bytes received: GetObject response bodies (their Content-Length). */
  readonly read: number;
  /** Object bytes sent: PutObject and UploadPart request bodies. */
  readonly written: number;
  /** Bytes by operation (`GetObject`, `PutObject`, `UploadPart`). */
  readonly byOperation: Record<string, number>;
  /** Calls whose body size could not be told (a stream without ContentLength): 0 for this pipeline's code. */
  readonly unmeasured: number;
}

/**
 * Counts S3 object bytes moved through the caller: what a Lambda pays for in time and network when it reads or
 * writes object data itself. Server-side copies (CopyObject, UploadPartCopy) move no bytes through the caller
 * and count nothing; neither do requests without object data (HEAD, LIST, DELETE). Each call counts once, as the
 * code makes it (the SDK's own retries of a request are not counted again); a GetObject that fails counts
 * nothing. Attach it to any number of client sets: the counts add up.
 */
export class ByteCounter {
  private readBytes = 0;
  private writtenBytes = 0;
  private unknown = 0;
  private readonly operations = new Map<string, number>();
  private readonly kept: CountedCall[] | undefined;

  /** `keepCalls`: also keep every counted call with its bucket and key ({@link calls}), to attribute bytes. */
  constructor(options: { keepCalls?: boolean } = {}) {
    this.kept = options.keepCalls ? [] : undefined;
  }

  /** Adds the byte-counting middleware to the S3 client (adding it again to the same client replaces it). */
  attach(clients: Pick<AwsClients, 's3'>): this {
    const stack = clients.s3.middlewareStack as unknown as Stack;
    const middleware: InitializeMiddleware<object, MetadataBearer> = (next, context) => async (args) => {
      const operation = String(context.commandName).replace(/Command$/, '');
      const input = args.input as {
        Body?: unknown;
        ContentLength?: unknown;
        Bucket?: unknown;
        Key?: unknown;
      };
      const where = { bucket: String(input.Bucket ?? ''), key: String(input.Key ?? '') };
      if (WRITES.has(operation)) {
        const bytes = bodyBytes(input.Body, input.ContentLength);
        if (bytes === undefined) this.unknown++;
        else this.add(operation, bytes, 'written', where);
        return next(args);
      }
      const result = await next(args);
      if (READS.has(operation)) {
        const length = (result.output as { ContentLength?: unknown }).ContentLength;
        if (typeof length === 'number') this.add(operation, length, 'read', where);
        else this.unknown++;
      }
      return result;
    };
    stack.add(middleware, { step: 'initialize', name: 'eosByteCounter', override: true });
    return this;
  }

  private add(
    operation: string,
    bytes: number,
    direction: 'read' | 'written',
    where: { bucket: string; key: string },
  ): void {
    if (direction === 'read') this.readBytes += bytes;
    else this.writtenBytes += bytes;
    this.operations.set(operation, (this.operations.get(operation) ?? 0) + bytes);
    this.kept?.push({ operation, ...where, bytes, direction });
  }

  /** Every counted call in the order counted (empty unless made with `{ keepCalls: true }`). */
  calls(): readonly CountedCall[] {
    return this.kept ?? [];
  }

  snapshot(): ByteCounts {
    return {
      read: this.readBytes,
      written: this.writtenBytes,
      byOperation: Object.fromEntries([...this.operations].sort(([a], [b]) => a.localeCompare(b))),
      unmeasured: this.unknown,
    };
  }

  /** Bytes read and written. */
  total(): number {
    return this.readBytes + this.writtenBytes;
  }

  reset(): void {
    this.readBytes = 0;
    this.writtenBytes = 0;
    this.unknown = 0;
    this.operations.clear();
    this.kept?.splice(0);
  }
}

/**
 * Counts AWS calls by operation through SDK middleware: the benchmark and the tests use it to check the claim
 * of two calls per batch in steady state.
 */
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';
import type { AwsClients } from './clients.ts';

type Stack = MiddlewareStack<object, MetadataBearer>;

export class CallCounter {
  private readonly counts = new Map<string, number>();
  /** Items written through transactions (each costs 2 write request units per KB). */
  private items = 0;

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
      const items = (args.input as { TransactItems?: unknown[] }).TransactItems;
      if (items) this.items += items.length;
      return next(args);
    };
    // 'initialize' runs once per call, before the SDK's own retries: calls as the code makes them.
    stack.add(middleware, { step: 'initialize', name: 'eosCallCounter', override: true });
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

  reset(): void {
    this.counts.clear();
    this.items = 0;
  }
}

/**
 * Counts AWS calls by operation through SDK middleware: the benchmark and the tests use it to check the claim
 * of two calls per batch in steady state.
 */
import type { AwsClients } from './clients.ts';

export class CallCounter {
  private readonly counts = new Map<string, number>();

  /** Adds the counting middleware to every client (idempotent per client). */
  attach(clients: AwsClients): this {
    for (const [service, client] of Object.entries(clients) as Array<
      [string, AwsClients[keyof AwsClients]]
    >) {
      client.middlewareStack.addRelativeTo(
        (next, context) => async (args) => {
          const operation = `${service}:${String(context.commandName).replace(/Command$/, '')}`;
          this.counts.set(operation, (this.counts.get(operation) ?? 0) + 1);
          return next(args);
        },
        { name: 'eosCallCounter', relation: 'before', toMiddleware: 'serializerMiddleware', override: true },
      );
    }
    return this;
  }

  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.counts].sort(([a], [b]) => a.localeCompare(b)));
  }

  total(): number {
    return [...this.counts.values()].reduce((a, b) => a + b, 0);
  }

  reset(): void {
    this.counts.clear();
  }
}

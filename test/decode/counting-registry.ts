/**
 * A Confluent-shaped registry on loopback HTTP for the lookup-limit tests: every id it is asked for is served the
 * same Avro schema after `delayMs`, unless `answers` sets another status for that id. It counts requests and the
 * most that were ever in flight at once, and keeps each request's Authorization header.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface CountingRegistry {
  readonly url: string;
  /** The status to answer for an id instead of serving the schema (404 included). */
  readonly answers: Map<number, number>;
  readonly requested: number[];
  readonly authorizations: (string | undefined)[];
  readonly maxInFlight: number;
  delayMs: number;
  /** When set, a request without exactly this Authorization header is answered 401. */
  requiredAuthorization: string | undefined;
  reset(): void;
  close(): Promise<void>;
}

export async function startCountingRegistry(schema: string): Promise<CountingRegistry> {
  let inFlight = 0;
  let maxInFlight = 0;
  const server = createServer((request, response) => {
    const id = Number(/^\/schemas\/ids\/(\d+)$/.exec(request.url ?? '')?.[1] ?? Number.NaN);
    registry.requested.push(id);
    registry.authorizations.push(request.headers.authorization);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    setTimeout(() => {
      inFlight--;
      const unauthorized =
        registry.requiredAuthorization !== undefined &&
        request.headers.authorization !== registry.requiredAuthorization;
      const status = unauthorized ? 401 : (registry.answers.get(id) ?? 200);
      const body = status === 200 ? { schema } : { error_code: status * 100, message: 'refused' };
      response.writeHead(status, { 'content-type': 'application/vnd.schemaregistry.v1+json' });
      response.end(JSON.stringify(body));
    }, registry.delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const registry: CountingRegistry = {
    url: `http://127.0.0.1:${port}`,
    answers: new Map(),
    requested: [],
    authorizations: [],
    delayMs: 20,
    requiredAuthorization: undefined,
    get maxInFlight() {
      return maxInFlight;
    },
    reset() {
      registry.answers.clear();
      registry.requested.length = 0;
      registry.authorizations.length = 0;
      registry.delayMs = 20;
      registry.requiredAuthorization = undefined;
      maxInFlight = 0;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return registry;
}

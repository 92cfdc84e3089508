/**
 * A Confluent-compatible schema registry for the local run, served over loopback HTTP with nothing but node:http:
 * `GET /schemas/ids/<id>` answers `{"schema": "<the .avsc text>"}` (no `schemaType`: Avro, as Confluent's REST API
 * says), an unknown id 404 `{"error_code": 40403}`, as the real registry does. It holds this example's two schema
 * versions, id 1 (`payment-v1.avsc`) and id 2 (`payment-v2.avsc`). In production the transform's `registry.url`
 * points at your registry (Confluent Platform or Cloud, Redpanda, Karapace, Apicurio's Confluent API…).
 *
 *   npx tsx examples/payments-avro/registry.ts [port]      # serves until interrupted (default port 8081)
 */
import { readFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** The registry's schemas by id: what a producer registered before writing. */
export const SCHEMAS: ReadonlyMap<number, string> = new Map([
  [1, readFileSync(new URL('./payment-v1.avsc', import.meta.url), 'utf8')],
  [2, readFileSync(new URL('./payment-v2.avsc', import.meta.url), 'utf8')],
]);

export interface RunningRegistry {
  readonly url: string;
  /** The paths asked for, in order (the processor asks once per schema id and caches). */
  readonly requests: readonly string[];
  close(): Promise<void>;
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/vnd.schemaregistry.v1+json' });
  response.end(JSON.stringify(body));
}

/** Serves {@link SCHEMAS} on 127.0.0.1 (`port` 0: a free one). */
export async function serveRegistry(port = 0): Promise<RunningRegistry> {
  const requests: string[] = [];
  const server = createServer((request, response) => {
    requests.push(request.url ?? '');
    const match = /^\/schemas\/ids\/(\d+)$/.exec(request.url ?? '');
    const schema = match && request.method === 'GET' ? SCHEMAS.get(Number(match[1])) : undefined;
    if (schema === undefined) send(response, 404, { error_code: 40403, message: 'Schema not found' });
    else send(response, 200, { schema });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${bound}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const registry = await serveRegistry(process.argv[2] === undefined ? 8081 : Number(process.argv[2]));
  process.stdout.write(`schema registry on ${registry.url} (ids ${[...SCHEMAS.keys()].join(', ')})\n`);
}

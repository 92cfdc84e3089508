/**
 * The example in one command: serves the schema registry on loopback, then runs `eos local` with the transform
 * and the committed input, pointing the transform at the registry through `SCHEMA_REGISTRY_URL`. Extra arguments
 * go to `eos local` (`--faults none`, `--export DIR`, `--seed 3`…); its exit code is this command's.
 *
 *   npx tsx examples/payments-avro/run.ts [eos local options…]
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { serveRegistry } from './registry.ts';

const here = (file: string): string => fileURLToPath(new URL(file, import.meta.url));

/** The `eos local` arguments of this example (without the extra ones given on the command line). */
export function eosLocalArgs(): string[] {
  return [
    '--transform',
    here('./transform.ts'),
    '--input',
    here('./payments.jsonl'),
    // Avro values have no JSON field to read: the transform returns each event's key (its eventId).
    '--idempotency-key',
    'transform',
    '--topic',
    'payments',
    '--partitions',
    '2',
    '--batch-size',
    '10',
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const registry = await serveRegistry();
  process.stdout.write(`schema registry on ${registry.url}\n`);
  const eos = spawn('npx', ['eos', 'local', ...eosLocalArgs(), ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, SCHEMA_REGISTRY_URL: registry.url },
  });
  const code = await new Promise<number>((resolve) => eos.on('close', (exit) => resolve(exit ?? 1)));
  process.stdout.write(`registry lookups: ${registry.requests.join(', ') || 'none'}\n`);
  await registry.close();
  process.exit(code);
}

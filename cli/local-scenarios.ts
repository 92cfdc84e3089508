/** What the operations scenarios of `eos local --scenario` add to a run (docs/local.md). */
import { OptionError } from '../local/errors.ts';
import type { InputRecord } from '../local/input.ts';
import type { Transform } from '../shared/transforms/types.ts';
import type { LocalCommandOptions } from './local-options.ts';

/**
 * `redrive`: the run's processors use the transform with a bug (GBP orders are rejected: "not supported yet");
 * after the run, `eos redrive` sends the dead letters back with the transform itself (the fix), twice.
 * `replay`: the same bug; after the run the middle half of every partition is replayed with the fix into a new
 * generation (`local/replay-scenario.ts`).
 */
export function withGbpBug(fixed: Transform): Transform {
  return {
    name: `${fixed.name} (with a GBP bug)`,
    ...(fixed.valueFormat ? { valueFormat: fixed.valueFormat } : {}),
    ...(fixed.prepare
      ? { prepare: (records: Parameters<NonNullable<Transform['prepare']>>[0]) => fixed.prepare!(records) }
      : {}),
    apply(record) {
      if (record.value?.includes('"currency":"GBP"')) {
        return { kind: 'poison', error: 'bug: currency GBP is not supported yet' };
      }
      return fixed.apply(record);
    },
  };
}

/**
 * `recreate-topic`: once the first generation is acknowledged the topic is deleted and created again with a second
 * generation (half as many generated records, another seed: other order ids), from offset 0.
 */
export async function secondGenerationFor(
  options: LocalCommandOptions,
  first: readonly InputRecord[],
): Promise<InputRecord[] | undefined> {
  if (options.scenario !== 'recreate-topic') return undefined;
  if (options.input !== undefined) {
    throw new OptionError('--scenario', 'recreate-topic generates both generations: not with --input');
  }
  const { generateOrders } = await import('../local/generator.ts');
  return generateOrders({
    seed: (options.seed + 1) >>> 0,
    records: Math.max(1, Math.ceil(first.length / 2)),
    partitions: options.partitions,
    poisonRate: options.faults.poison,
  });
}

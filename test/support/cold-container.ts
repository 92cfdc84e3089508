/**
 * Cold processor containers for the starting-fence tests: an invocation held before its first read, batches staged
 * by fresh containers, the partition's fence, `eos epoch --start-new` on it, and what became of an invocation.
 * Every function runs against the resources of `freshResources` (DynamoDB Local and the S3 server).
 */
import { runEpoch } from '../../cli/epoch.ts';
import type { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { OffsetsWentBackwardsError, UnprovenRedeliveryError } from '../../shared/errors.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import type { TestResources } from './aws.ts';
import { gate } from './hooks.ts';
import { mskEvent, orderRecords } from './msk.ts';

/** The `orders` transform with a `prepare` that waits for the test: the invocation stalls before any read. */
export function heldTransform() {
  const reached = gate();
  const release = gate();
  const orders = builtinTransform('orders');
  const transform: Transform = {
    name: orders.name,
    apply: (record) => orders.apply(record),
    async prepare() {
      reached.open();
      await release.opened;
    },
  };
  return { transform, reached: reached.opened, release: release.open };
}

/** A fresh container (no cached fence) on `clock`. */
export function container(
  res: TestResources,
  settings: Settings,
  clock: ManualClock,
  extra: Partial<ProcessorDeps> = {},
) {
  return createProcessor({ settings, clients: res.clients, clock, ...extra });
}

/** Batches of ten of generation `prefix` from `from` up to and including `to`, each by a fresh container. */
export async function stageBatches(
  res: TestResources,
  settings: Settings,
  clock: ManualClock,
  from: number,
  to: number,
  prefix = 'p0',
): Promise<void> {
  for (let first = from; first <= to; first += 10) {
    clock.advance(1_000);
    await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, first, 10, prefix)));
  }
}

/** The fence of `orders` partition `partition`. */
export async function fenceOf(res: TestResources, settings: Settings, partition = 0) {
  return new StagingLedger(res.clients.dynamodb, res.table).readFence(
    settings.pipelineId,
    'orders',
    partition,
  );
}

/** `eos epoch --start-new` (without --force) on `orders` partition 0, its output discarded. */
export async function startNewEpoch(res: TestResources, settings: Settings) {
  return runEpoch(
    {
      table: res.table,
      pipeline: settings.pipelineId,
      topic: 'orders',
      partition: 0,
      startNew: true,
      force: false,
      json: true,
    },
    { dynamodb: res.clients.dynamodb, write: () => undefined },
  );
}

/** What became of one invocation: acknowledged, stopped (offsets backwards), unproven (retryable), or the error. */
export async function outcomeOf(run: Promise<unknown>): Promise<string> {
  return run.then(
    () => 'acknowledged',
    (error: unknown) =>
      error instanceof OffsetsWentBackwardsError
        ? 'stopped'
        : error instanceof UnprovenRedeliveryError
          ? 'unproven'
          : String(error),
  );
}

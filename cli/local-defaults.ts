/**
 * The constants `eos local`'s help shows, apart from the modules that use them: those load zod, the processor
 * and the emulator, and `eos --help` must stay quick. test/cli/local-endpoint.test.ts pins each copy to its source.
 */
import type { DeliveryGuarantee, MissingIdempotencyKey, Settings } from '../shared/config/settings.ts';

/** What `eos local` uses where neither a flag nor a variable sets it. */
export const LOCAL_SETTING_DEFAULTS = {
  ledgerTable: 'eos-local-ledger',
  bucket: 'eos-local',
  checkpointLeaseSeconds: '10',
} as const satisfies Partial<Record<keyof Settings, string>>;

/** The emulated topic when neither `--topic` nor `EOS_TOPICS` names one. */
export const LOCAL_DEFAULT_TOPIC = 'orders';

/** `shared/config/settings.ts`'s DELIVERY_GUARANTEES. */
export const GUARANTEES = [
  'exactly-once',
  'at-least-once',
  'none',
] as const satisfies readonly DeliveryGuarantee[];

/** `local/msk-emulator.ts`'s MAX_BATCH_SIZE. */
export const MAX_BATCH_SIZE = 10_000;

/** `shared/config/settings.ts`'s MISSING_IDEMPOTENCY_KEY. */
export const MISSING_KEY_CHOICES = [
  'dead-letter',
  'offset-only',
] as const satisfies readonly MissingIdempotencyKey[];

/**
 * A default run is a first impression: under 30 s on two cores, and still every fault kind firing and more than
 * ten checkpoints committing while the log drains (docs/local.md, "What a default run exercises"). What costs is
 * per record (one conditional write of its idempotency claim) and per invocation (a staged object, a transaction,
 * its copy, check, promotion and cleanup in a checkpoint), so: 4,000 records in batches of 20 (about 230
 * invocations, which the per-attempt fault rates need), two partitions (half the concurrent claim writes queued in
 * DynamoDB Local ahead of the coordinator's calls, so checkpoints take half as long and twice as many fit), and a
 * checkpoint as soon as the previous one is done (500 ms): the count then follows the work, not the machine's speed.
 */
export const LOCAL_DEFAULTS = {
  records: 4_000,
  partitions: 2,
  guarantee: 'exactly-once',
  faults: 'all',
  seed: 1,
  checkpointIntervalMs: 500,
  transform: 'orders',
  batchSize: 20,
} as const;

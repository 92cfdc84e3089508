/**
 * The constants `eos local`'s help shows, apart from the modules that use them: those load zod, the processor
 * and the emulator, and `eos --help` must stay quick. test/cli-local-endpoint.test.ts pins each copy to its source.
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

/**
 * Staged-file entries kept inside their partition's fence item (P1, P3), one attribute each, instead of an item of
 * their own. The staging write then touches one item: a plain conditional UpdateItem when the chunk has no
 * claims, state or key window, which DynamoDB bills by the item's size (about two write units with a few entries)
 * instead of a transaction of two items (four), and cleanup removes a checkpoint's entries with one UpdateItem per
 * partition instead of one delete per entry.
 *
 * An entry is inline or an item, never both: the processor writes it with the fence move either way, so it is
 * durable exactly when the fence passed it. Inline entries are bounded by {@link INLINE_BYTES_BUDGET}: the chunk
 * past it writes its entries as items, and moves the fence's into items too, in the same transaction (the fence item
 * stays far under DynamoDB's 400 KB, L3). A reader that read the fence before such a move and queries the items
 * after finds an entry in both places: it reads it once (`staged-entries.ts`).
 * Every staging write of this release notes in the fence the highest offset an entry item may have
 * ({@link ENTRY_ITEMS_UP_TO}) and the staged offset it wrote ({@link ENTRY_ITEMS_NOTED_AT}), so readers query the
 * staged-entry items only when a range reaches below the mark. The mark holds only while the fence is where this
 * release left it: a processor of an earlier release moves the fence and writes entry items without touching
 * either, so a fence whose staged offset is not the one noted may have items anywhere (readers query; the next
 * writer of this release marks everything below the offset it read).
 *
 * Coordinators of earlier releases read entry items only: processors put entries inline only once every
 * coordinator step that may run reads them (`processor/inline-gate.ts`).
 *
 * The attribute's name holds the entry's last offset and stream; its value the rest, packed into bytes
 * (`packed-entry.ts`). The object key's template (the key with the entry's own values as placeholders) is the same
 * for most entries of a stream, so the fence holds it once, `k:<stream>`, written with the first entry that shares
 * it and never changed; an entry with another template carries its own. Nothing in it is trusted: `inlineItemsOf`
 * turns a malformed value into a rejected item, as the item reader does.
 */
import { type ItemKey, padOffset, STREAMS, type Stream } from './layout.ts';
import { isSharedTemplate, packEntryValue, templateOf, unpackEntryValue } from './packed-entry.ts';
import type { StagedFileEntry } from './records.ts';

/** The fence attribute naming the highest offset a staged-entry item of the partition may have. */
export const ENTRY_ITEMS_UP_TO = 'entryItemsUpTo';

/** The fence attribute naming the staged offset the mark was written with (see the module comment). */
export const ENTRY_ITEMS_NOTED_AT = 'entryItemsNotedAt';

/**
 * Bytes of inline entries a fence item holds at most: about 30 entries of ~100 bytes, a checkpoint interval's
 * batches at the stack's defaults (12: a 5 s batching window, 1 minute checkpoints) with room. An inline write
 * costs what the fence item weighs, `ceil(F / 1 KB)` units, so each entry makes the writes after it dearer until a
 * cleanup; the chunk past the budget moves the fence's entries into items (two units each, once: a transaction
 * bills each item twice) and the fence is small again (`staging-effects.ts` `flushedEntries`). The budget bounds the item (L3)
 * and sets where growing costs more than moving: a larger one makes every write dearer, a smaller one moves sooner.
 */
export const INLINE_BYTES_BUDGET = 3072;

const PREFIX = 'e:';
/** An inline entry's attribute, in the one spelling `inlineAttribute` writes (no leading zeros). */
const NAME = /^e:(0|[1-9]\d{0,19}):(output|deadletter)$/;

/** The attribute an inline entry lies at. */
export function inlineAttribute(lastOffset: number, stream: Stream): string {
  return `${PREFIX}${lastOffset}:${stream}`;
}

/** Where an inline entry lies: its fence item and attribute. */
export interface InlineAt {
  readonly fence: ItemKey;
  readonly attribute: string;
}

/** The fence attribute holding the key template a stream's inline entries may share (`packed-entry.ts`). */
export function templateAttribute(stream: Stream): string {
  return `k:${stream}`;
}

/** The key templates of a fence item, by stream (read with the item; none: `{}`). */
export type KeyTemplates = Readonly<Partial<Record<Stream, string>>>;

export function templatesIn(item: Readonly<Record<string, unknown>>): KeyTemplates {
  const templates: Partial<Record<Stream, string>> = {};
  for (const stream of STREAMS) {
    const template = item[templateAttribute(stream)];
    if (typeof template === 'string') templates[stream] = template;
  }
  return templates;
}

/** An inline entry as written: its attribute and value, and how its key's template is kept. */
export interface PackedInline {
  readonly name: string;
  readonly value: Uint8Array;
  /**
   * The fence's template the entry shares: `fresh` when this write creates the attribute (on condition it is
   * absent), else on condition it holds that template. Absent: the template is in the value.
   */
  readonly template?: { readonly attribute: string; readonly value: string; readonly fresh: boolean };
}

/**
 * `entry` packed for the fence item whose templates are `known` (undefined: not known, the template goes in the
 * value). An entry shares its stream's template when the fence has that one, or has none yet (this write creates
 * it). A template is written once and never changed, so an entry of another (a key format of another release, a
 * second object of one attempt) keeps its own: the entries that share one can never be given another.
 */
export function packEntry(entry: StagedFileEntry, known: KeyTemplates | undefined): PackedInline {
  const name = inlineAttribute(entry.lastOffset, entry.stream);
  const template = templateOf(entry);
  const there = known?.[entry.stream];
  const shares =
    known !== undefined && isSharedTemplate(template) && (there === undefined || there === template);
  if (!shares) return { name, value: packEntryValue(entry, false) };
  return {
    name,
    value: packEntryValue(entry, true),
    template: { attribute: templateAttribute(entry.stream), value: template, fresh: there === undefined },
  };
}

/** DynamoDB's size of a value, closely enough to budget by (strings and bytes exact, numbers at most). */
function sizeOf(value: unknown): number {
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (typeof value === 'number') return Math.ceil(String(Math.abs(value)).replace('.', '').length / 2) + 1;
  if (typeof value === 'boolean' || value === null || value === undefined) return 1;
  if (value instanceof Uint8Array) return value.byteLength;
  return Object.entries(value as object).reduce(
    (sum, [name, v]) => sum + Buffer.byteLength(name) + sizeOf(v) + 1,
    3,
  );
}

/** The bytes an inline entry adds to its fence item. */
export function inlineBytesOf(name: string, value: unknown): number {
  return Buffer.byteLength(name) + sizeOf(value);
}

/** The inline-entry attributes of a fence item as read, by name (attributes of any other name left out). */
export function inlineAttributesIn(item: Readonly<Record<string, unknown>>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(item).filter(([name]) => NAME.test(name)));
}

/** The bytes of every inline entry of a fence item as read (attributes of any other name count nothing). */
export function inlineBytesIn(item: Readonly<Record<string, unknown>>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(item)) if (NAME.test(name)) bytes += inlineBytesOf(name, value);
  return bytes;
}

/** One inline attribute of a fence item, read: an entry, or a rejected value. */
export type InlineItem = { readonly at: InlineAt; readonly sk: string } & (
  | { readonly kind: 'entry'; readonly entry: StagedFileEntry }
  | {
      readonly kind: 'rejected';
      readonly reason: 'malformed';
      readonly item: Readonly<Record<string, unknown>>;
    }
);

/**
 * The inline entries of a fence item with `above < lastOffset <= upTo`, in the order of the sort keys their items
 * would have (`sk`: offset, then stream). A value that does not unpack to an entry comes back rejected.
 */
export function inlineItemsOf(
  item: Readonly<Record<string, unknown>>,
  where: {
    readonly pipeline: string;
    readonly topic: string;
    readonly partition: number;
    readonly fence: ItemKey;
  },
  range: { readonly above: number; readonly upTo: number },
): InlineItem[] {
  const found: InlineItem[] = [];
  const templates = templatesIn(item);
  for (const [name, value] of Object.entries(item)) {
    const match = NAME.exec(name);
    if (!match) continue;
    const lastOffset = Number(match[1]);
    if (!Number.isSafeInteger(lastOffset) || lastOffset <= range.above || lastOffset > range.upTo) continue;
    const stream = match[2] as Stream;
    const at = { fence: where.fence, attribute: name };
    const sk = `${padOffset(lastOffset)}#${stream}`;
    const entry = unpackEntryValue(value, { ...where, lastOffset, stream, template: templates[stream] });
    found.push(
      entry
        ? { kind: 'entry', at, sk, entry }
        : { kind: 'rejected', at, sk, reason: 'malformed', item: { [name]: value } },
    );
  }
  return found.sort((a, b) => (a.sk < b.sk ? -1 : a.sk > b.sk ? 1 : 0));
}

/**
 * The highest offset an entry item of the fence's partition may have, when the fence says so and the mark holds
 * (the fence is at the offset noted with it); undefined when items may lie anywhere.
 */
export function entryItemsUpTo(fence: Readonly<Record<string, unknown>> | undefined): number | undefined {
  const upTo = fence?.[ENTRY_ITEMS_UP_TO];
  const notedAt = fence?.[ENTRY_ITEMS_NOTED_AT];
  if (!Number.isSafeInteger(upTo) || !Number.isSafeInteger(notedAt)) return undefined;
  return notedAt === fence?.stagedOffset ? (upTo as number) : undefined;
}

/** Whether entry items with `above < lastOffset` may exist, by the fence's mark (see the module comment). */
export function mayHaveEntryItems(
  fence: Readonly<Record<string, unknown>> | undefined,
  above: number,
): boolean {
  const upTo = entryItemsUpTo(fence);
  return upTo === undefined || upTo > above;
}

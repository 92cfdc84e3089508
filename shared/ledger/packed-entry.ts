/**
 * The value of an inline staged entry (`inline-entries.ts`): the entry's fields the attribute name does not hold
 * (its last offset and stream), packed into bytes, because DynamoDB bills every staging write by the whole fence
 * item and a fence holds a checkpoint interval's entries. About 75 bytes where a map with named fields takes 190:
 *
 *   byte 0     format (2; format 1, of the release before, also holds the object's MD5 after its SHA-256: still
 *              read, never written, as no reader uses the MD5)
 *   byte 1     flags: 1 gzip, 2 the attempt id is a UUID (16 bytes), 4 the key's template is the fence's for the
 *              stream (`k:<stream>`, written once: `inline-entries.ts`), else it follows
 *   varints    lastOffset - firstOffset, record count, bytes, stagedAt (unsigned LEB128, safe integers)
 *   32         SHA-256 of the object
 *   attempt    16 bytes, or a varint length and UTF-8
 *   template   (flag 4 clear) a varint length and UTF-8
 *
 * The object key is kept as a template: the entry's own values (attempt, offsets, pipeline, topic, stream)
 * replaced by one-character placeholders, so the ledger need not know the sink's key format to shorten it.
 *
 * A fence written by a release before the packed format holds a map per entry (`f`, `c`, `b`, `h`, `m`, `g`, `a`,
 * `t`, `k`): still read. Nothing is trusted: a value that does not unpack exactly is no entry.
 */
import { padOffset, type Stream } from './layout.ts';
import { PackedReader, varint, withLength } from './packed-bytes.ts';
import type { StagedFileEntry } from './records.ts';

const FORMAT = 2;
/** The format of the release before: the same, with the object's MD5 after its SHA-256. */
const FORMAT_WITH_MD5 = 1;
const GZIP = 1;
const UUID_ATTEMPT = 2;
const TEMPLATE_IN_FENCE = 4;
const KNOWN_FLAGS = GZIP | UUID_ATTEMPT | TEMPLATE_IN_FENCE;

type KeyValues = Pick<
  StagedFileEntry,
  'pipeline' | 'stream' | 'topic' | 'firstOffset' | 'lastOffset' | 'attemptId'
>;

/** Where an entry's packed value lies: what the attribute and its fence say, and the fence's key template. */
export interface EntryPlace {
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  readonly lastOffset: number;
  readonly stream: Stream;
  /** The fence's template for the stream (`k:<stream>`), if it has one. */
  readonly template: string | undefined;
}

/** The entry's values a staged key is made of, longest first, each with its placeholder. */
function keyParts(entry: KeyValues): Array<[string, string]> {
  const parts: Array<[string, string]> = [
    [entry.attemptId, '\u0001'],
    [padOffset(entry.firstOffset), '\u0002'],
    [padOffset(entry.lastOffset), '\u0003'],
    [entry.pipeline, '\u0004'],
    [entry.topic, '\u0005'],
    [entry.stream, '\u0006'],
  ];
  return parts.filter(([value]) => value.length > 0);
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the placeholders are control characters by design.
const PLACEHOLDERS = /[\u0001-\u0006]/;

/**
 * The key with the entry's values replaced by placeholders. Undone value by value in the reverse order, so each
 * placeholder gets back exactly what it replaced; a key or value that holds a placeholder character is kept whole
 * (a template without placeholders: the key itself).
 */
export function templateOf(entry: StagedFileEntry): string {
  const parts = keyParts(entry);
  if (PLACEHOLDERS.test(entry.key) || parts.some(([value]) => PLACEHOLDERS.test(value))) return entry.key;
  const template = parts.reduce((key, [value, mark]) => key.replaceAll(value, mark), entry.key);
  return keyOf(template, entry) === entry.key ? template : entry.key;
}

/**
 * Whether entries of other offsets and attempts can share a template: it holds the placeholders of the attempt and
 * of both offsets. A chunk of one record (first offset = last) makes a template with one offset placeholder where
 * chunks of more have two: it keeps its own rather than fix the fence's on a shape the others do not have.
 */
export function isSharedTemplate(template: string): boolean {
  return ['\u0001', '\u0002', '\u0003'].every((mark) => template.includes(mark));
}

function keyOf(template: string, entry: KeyValues): string {
  return keyParts(entry)
    .reverse()
    .reduce((key, [value, mark]) => key.replaceAll(mark, value), template);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX = (length: number) => new RegExp(`^[0-9a-f]{${length}}$`);
const SHA256_HEX = HEX(64);

function uuidOf(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * `entry` packed; `templateInFence`: its key's template is the fence's for its stream, so it is not repeated.
 * Throws on an entry the processor cannot have made (digests that are not hex of their length, offsets out of
 * order): a defect, not data.
 */
export function packEntryValue(entry: StagedFileEntry, templateInFence: boolean): Uint8Array {
  if (!SHA256_HEX.test(entry.sha256) || entry.firstOffset > entry.lastOffset) {
    throw new Error(`staged entry ${entry.key} has malformed digests or offsets`);
  }
  const uuid = UUID.test(entry.attemptId);
  const flags =
    (entry.gzip ? GZIP : 0) | (uuid ? UUID_ATTEMPT : 0) | (templateInFence ? TEMPLATE_IN_FENCE : 0);
  return Buffer.concat([
    Buffer.from([FORMAT, flags]),
    Buffer.from([
      ...varint(entry.lastOffset - entry.firstOffset),
      ...varint(entry.recordCount),
      ...varint(entry.bytes),
      ...varint(entry.stagedAt),
    ]),
    Buffer.from(entry.sha256, 'hex'),
    uuid ? Buffer.from(entry.attemptId.replaceAll('-', ''), 'hex') : withLength(entry.attemptId),
    templateInFence ? Buffer.alloc(0) : withLength(templateOf(entry)),
  ]);
}

function unpackBytes(value: Uint8Array, place: EntryPlace): StagedFileEntry | undefined {
  const read = new PackedReader(value);
  const format = read.byte();
  const flags = read.byte();
  if (format !== FORMAT && format !== FORMAT_WITH_MD5) return undefined;
  if (flags === undefined || (flags & ~KNOWN_FLAGS) !== 0) return undefined;
  const span = read.varint();
  const recordCount = read.varint();
  const bytes = read.varint();
  const stagedAt = read.varint();
  const sha256 = read.take(32);
  const md5 = format === FORMAT_WITH_MD5 ? read.take(16) : Buffer.alloc(0);
  const uuid = flags & UUID_ATTEMPT ? read.take(16) : undefined;
  const attemptId = uuid ? uuidOf(uuid) : flags & UUID_ATTEMPT ? undefined : read.text();
  const template = flags & TEMPLATE_IN_FENCE ? place.template : read.text();
  if (span === undefined || recordCount === undefined || bytes === undefined || stagedAt === undefined)
    return;
  if (!sha256 || !md5 || !attemptId || template === undefined || !read.done || span > place.lastOffset)
    return;
  return entryOf(place, {
    firstOffset: place.lastOffset - span,
    recordCount,
    bytes,
    stagedAt,
    sha256: sha256.toString('hex'),
    ...(md5.byteLength > 0 ? { md5: md5.toString('hex') } : {}),
    gzip: (flags & GZIP) !== 0,
    attemptId,
    template,
  });
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

function bytesOf(value: unknown, length: number): Buffer | undefined {
  return value instanceof Uint8Array && value.byteLength === length ? Buffer.from(value) : undefined;
}

/** An entry of the release before the packed format: a map of named fields. */
function unpackMap(value: object, place: EntryPlace): StagedFileEntry | undefined {
  const v = value as Partial<Record<'f' | 'c' | 'b' | 'h' | 'm' | 'g' | 'a' | 't' | 'k', unknown>>;
  const sha256 = bytesOf(v.h, 32);
  const md5 = bytesOf(v.m, 16);
  if (!isCount(v.f) || !isCount(v.c) || !isCount(v.b) || !isCount(v.t)) return undefined;
  if (!sha256 || !md5 || typeof v.g !== 'boolean' || typeof v.a !== 'string' || v.a.length === 0)
    return undefined;
  if (typeof v.k !== 'string') return undefined;
  return entryOf(place, {
    firstOffset: v.f,
    recordCount: v.c,
    bytes: v.b,
    stagedAt: v.t,
    sha256: sha256.toString('hex'),
    md5: md5.toString('hex'),
    gzip: v.g,
    attemptId: v.a,
    template: v.k,
  });
}

function entryOf(
  place: EntryPlace,
  f: Omit<StagedFileEntry, 'pipeline' | 'stream' | 'topic' | 'partition' | 'lastOffset' | 'key'> & {
    template: string;
  },
): StagedFileEntry {
  const { template, ...fields } = f;
  const values = { ...place, firstOffset: f.firstOffset, attemptId: f.attemptId };
  return {
    pipeline: place.pipeline,
    stream: place.stream,
    topic: place.topic,
    partition: place.partition,
    lastOffset: place.lastOffset,
    key: keyOf(template, values),
    ...fields,
  };
}

/** The entry a packed value holds at `place`, in either format; undefined when it is not one. */
export function unpackEntryValue(value: unknown, place: EntryPlace): StagedFileEntry | undefined {
  if (value instanceof Uint8Array) return unpackBytes(value, place);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  return unpackMap(value, place);
}

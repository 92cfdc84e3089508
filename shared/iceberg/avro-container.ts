/**
 * Avro object container files (Avro 1.11 spec, "Object Container Files"), written and read with avro-js's types:
 * the manifests and manifest lists of an Iceberg table are such files.
 *
 * Written deterministically: the same schema, metadata and records give the same bytes, so a retried commit
 * rewrites identical objects. avro-js's own `BlockEncoder` draws a random sync marker and takes no file metadata,
 * so the header and the single data block are assembled here: the sync marker is derived from the content, the
 * metadata keys keep the order given, the codec is `null`.
 *
 * Records are plain objects both ways (a union's value as it is, null for none; avro-js's own form holds it under
 * its branch's name). Longs are bigint both ways (Iceberg's snapshot ids use all 63 bits; avro-js's own long refuses what a double
 * cannot hold). Read: files of any writer, `null` or `deflate` codec, any number of blocks; with a reader schema,
 * records are projected onto it by field name (a field the writer did not have takes the reader's default, an int
 * read as a long widens). avro-js's own resolver cannot be used: it calls a custom long's reader on itself.
 */
import { createHash } from 'node:crypto';
import { inflateRawSync } from 'node:zlib';
import avro from 'avro-js/lib/schemas.js';
import { PipelineError } from '../errors.ts';

/** A file that is not an Avro object container file this module can read. */
export class AvroContainerError extends PipelineError {}

type AvroType = ReturnType<typeof avro.createType>;

interface LongMethods {
  fromBuffer(buf: Buffer): bigint;
  toBuffer(value: bigint): Buffer;
  fromJSON(value: unknown): bigint;
  toJSON(value: bigint): unknown;
  isValid(value: unknown): boolean;
  compare(a: bigint, b: bigint): number;
}

/** avro-js's custom long hook (not in the shared declaration of the package, which the decoders use). */
const { LongType } = avro.types as unknown as {
  LongType: { using(methods: LongMethods): AvroType };
};

const MIN_LONG = -(2n ** 63n);
const MAX_LONG = 2n ** 63n - 1n;

const BIGINT_LONG = LongType.using({
  fromBuffer: (buf) => buf.readBigInt64LE(0),
  toBuffer: (value) => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(value);
    return buf;
  },
  fromJSON: (value) => BigInt(value as string | number),
  toJSON: (value) =>
    value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : String(value),
  isValid: (value) => typeof value === 'bigint' && value >= MIN_LONG && value <= MAX_LONG,
  compare: (a, b) => (a < b ? -1 : a > b ? 1 : 0),
});

/** An Avro type of `schema` whose longs are bigint. */
export function avroType(schema: unknown): AvroType {
  return avro.createType(schema, { registry: { long: BIGINT_LONG } });
}

type Schema = string | readonly Schema[] | { readonly type: string; readonly [key: string]: unknown };
type Named = Map<string, Schema>;

function nameOf(schema: Schema): string {
  if (typeof schema === 'string') return schema;
  if (Array.isArray(schema)) throw new AvroContainerError('a union directly inside a union');
  const { type, name, namespace } = schema as { type: string; name?: string; namespace?: string };
  if (type === 'record' || type === 'enum' || type === 'fixed') {
    return namespace && !String(name).includes('.') ? `${namespace}.${name}` : String(name);
  }
  return type;
}

/**
 * `value` (plain: a union's value as it is, null for none) in avro-js's form (`wrap`), or back (`!wrap`): avro-js
 * holds a union's non-null value under its branch's name (`{long: 5n}`), a record's fields by name.
 */
function convert(schema: Schema, value: unknown, wrap: boolean, named: Named): unknown {
  if (typeof schema === 'string') {
    const definition = named.get(schema);
    return definition === undefined ? value : convert(definition, value, wrap, named);
  }
  if (Array.isArray(schema)) {
    if (value === null || value === undefined) return null;
    if (wrap) {
      const branch = schema.find((item) => nameOf(item) !== 'null');
      if (branch === undefined) throw new AvroContainerError('a value for a union of null alone');
      return { [nameOf(branch)]: convert(branch, value, wrap, named) };
    }
    const [name, inner] = Object.entries(value as object)[0] ?? [];
    const branch = schema.find((item) => nameOf(item) === name);
    if (branch === undefined) throw new AvroContainerError(`a union value of unknown branch ${name}`);
    return convert(branch, inner, wrap, named);
  }
  const object = schema as {
    type: string;
    fields?: { name: string; type: Schema }[];
    items?: Schema;
    values?: Schema;
  };
  if (object.type === 'record' || object.type === 'enum' || object.type === 'fixed') {
    named.set(nameOf(object), object);
  }
  if (object.type === 'record') {
    const record = (value ?? {}) as Record<string, unknown>;
    return Object.fromEntries(
      (object.fields ?? []).map((field) => [
        field.name,
        convert(field.type, record[field.name] ?? null, wrap, named),
      ]),
    );
  }
  if (object.type === 'array') {
    return (value as unknown[]).map((item) => convert(object.items as Schema, item, wrap, named));
  }
  if (object.type === 'map') {
    return Object.fromEntries(
      Object.entries(value as object).map(([key, item]) => [
        key,
        convert(object.values as Schema, item, wrap, named),
      ]),
    );
  }
  return value;
}

/** A plain value read with the writer's schema, as `schema` (the reader's) has it: see the module comment. */
function project(schema: Schema, value: unknown, named: Named): unknown {
  if (typeof schema === 'string') {
    const definition = named.get(schema);
    if (definition !== undefined) return project(definition, value, named);
    return schema === 'long' && typeof value === 'number' ? BigInt(value) : value;
  }
  if (Array.isArray(schema)) {
    if (value === null || value === undefined) return null;
    const branch = schema.find((item) => nameOf(item) !== 'null');
    return branch === undefined ? null : project(branch, value, named);
  }
  const object = schema as {
    type: string;
    fields?: { name: string; type: Schema; default?: unknown }[];
    items?: Schema;
    values?: Schema;
  };
  if (object.type === 'record' || object.type === 'enum' || object.type === 'fixed') {
    named.set(nameOf(object), object);
  }
  if (object.type === 'record') {
    const record = value as Record<string, unknown>;
    return Object.fromEntries(
      (object.fields ?? []).map((field) => {
        if (field.name in record) return [field.name, project(field.type, record[field.name], named)];
        if (!('default' in field)) {
          throw new AvroContainerError(`the file's records have no ${field.name}, which has no default`);
        }
        return [field.name, field.default];
      }),
    );
  }
  if (object.type === 'array')
    return (value as unknown[]).map((item) => project(object.items as Schema, item, named));
  if (object.type === 'map') {
    return Object.fromEntries(
      Object.entries(value as object).map(([key, item]) => [
        key,
        project(object.values as Schema, item, named),
      ]),
    );
  }
  return project(object.type, value, named);
}

/** `value` in the form avro-js writes for `schema` (see {@link convert}). */
export function toAvroValue(schema: unknown, value: unknown): unknown {
  return convert(schema as Schema, value, true, new Map());
}

/** A value avro-js read for `schema` in plain form: unions unwrapped, records plain objects. */
export function fromAvroValue(schema: unknown, value: unknown): unknown {
  return convert(schema as Schema, value, false, new Map());
}

const MAGIC = Buffer.from('Obj\x01', 'latin1');
const HEADER = avro.createType({
  type: 'record',
  name: 'org.apache.avro.file.Header',
  fields: [
    { name: 'magic', type: { type: 'fixed', name: 'Magic', size: 4 } },
    { name: 'meta', type: { type: 'map', values: 'bytes' } },
    { name: 'sync', type: { type: 'fixed', name: 'Sync', size: 16 } },
  ],
});
const LONG = avroType('long');

/**
 * The container file of `records` written with `schema` (its JSON, attributes such as Iceberg's `field-id` kept
 * as given), `metadata` after `avro.schema` and `avro.codec`. Deterministic (see the module comment).
 */
export function encodeContainer(
  schema: object,
  metadata: ReadonlyArray<readonly [string, string]>,
  records: readonly unknown[],
): Buffer {
  const schemaJson = JSON.stringify(schema);
  const type = avroType(schema);
  const data = Buffer.concat(records.map((record) => type.toBuffer(toAvroValue(schema, record))));
  const meta: Record<string, Buffer> = {
    'avro.schema': Buffer.from(schemaJson),
    'avro.codec': Buffer.from('null'),
  };
  for (const [key, value] of metadata) {
    if (key in meta) throw new AvroContainerError(`metadata key ${key} is given twice`);
    meta[key] = Buffer.from(value);
  }
  const sync = createHash('sha256')
    .update('eos-avro-sync\0')
    .update(JSON.stringify(Object.entries(meta).map(([key, value]) => [key, value.toString('base64')])))
    .update(data)
    .digest()
    .subarray(0, 16);
  const header = HEADER.toBuffer({ magic: MAGIC, meta, sync });
  if (records.length === 0) return header;
  return Buffer.concat([
    header,
    LONG.toBuffer(BigInt(records.length)),
    LONG.toBuffer(BigInt(data.length)),
    data,
    sync,
  ]);
}

export interface DecodedContainer {
  /** The file's metadata, `avro.schema` and `avro.codec` included, as text. */
  readonly metadata: ReadonlyMap<string, string>;
  /** The writer's schema, parsed. */
  readonly schema: unknown;
  readonly records: unknown[];
}

function readLong(buf: Buffer, pos: number): { value: number; offset: number } {
  const { value, offset } = LONG.decode(buf, pos);
  if (offset < 0) throw new AvroContainerError('the file ends inside a block header');
  return { value: Number(value as bigint), offset };
}

/** The records of a container file, resolved to `readerSchema` when given (else as the writer wrote them). */
export function decodeContainer(bytes: Buffer, readerSchema?: object): DecodedContainer {
  if (!bytes.subarray(0, 4).equals(MAGIC)) throw new AvroContainerError('not an Avro object container file');
  const header = HEADER.decode(bytes, 0);
  if (header.offset < 0) throw new AvroContainerError('the file ends inside its header');
  const { meta, sync } = header.value as { meta: Record<string, Buffer>; sync: Buffer };
  const metadata = new Map(Object.entries(meta).map(([key, value]) => [key, value.toString('utf8')]));
  const schema: unknown = JSON.parse(metadata.get('avro.schema') ?? 'null');
  const codec = metadata.get('avro.codec') ?? 'null';
  if (codec !== 'null' && codec !== 'deflate')
    throw new AvroContainerError(`codec ${codec} is not supported`);
  const writer = avroType(schema);
  const records: unknown[] = [];
  let pos = header.offset;
  while (pos < bytes.length) {
    const count = readLong(bytes, pos);
    const size = readLong(bytes, count.offset);
    const end = size.offset + size.value;
    if (end + 16 > bytes.length) throw new AvroContainerError('the file ends inside a block');
    if (!bytes.subarray(end, end + 16).equals(sync))
      throw new AvroContainerError('a block has another sync marker');
    const raw = bytes.subarray(size.offset, end);
    const block = codec === 'deflate' ? inflateRawSync(raw) : raw;
    let at = 0;
    for (let index = 0; index < count.value; index++) {
      const decoded = writer.decode(block, at);
      if (decoded.offset < 0) throw new AvroContainerError('a block ends inside a record');
      const plain = fromAvroValue(schema, decoded.value);
      records.push(readerSchema ? project(readerSchema as Schema, plain, new Map()) : plain);
      at = decoded.offset;
    }
    pos = end + 16;
  }
  return { metadata, schema, records };
}

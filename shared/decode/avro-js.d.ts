/**
 * The part of avro-js the decoders use. Imported from `avro-js/lib/schemas.js`, not the package root: the root
 * (`lib/index.js`) also loads a deprecated validator that requires `underscore`, which avro-js 1.12.2 does not
 * declare, so importing the root fails with "Cannot find module 'underscore'".
 */
declare module 'avro-js/lib/schemas.js' {
  interface AvroResolver {
    readonly __avroResolver?: never;
  }
  interface AvroType {
    /** Reads one value at `pos`; `offset` is where it ended, or -1 when the buffer ended first. */
    decode(buf: Buffer, pos?: number, resolver?: AvroResolver): { value: unknown; offset: number };
    /** A resolver reading values written with `writer` as this type; throws when the schemas are incompatible. */
    createResolver(writer: AvroType): AvroResolver;
    /** Reads one value filling `buf`; throws on a truncated buffer or trailing data. */
    fromBuffer(buf: Buffer, resolver?: AvroResolver, noCheck?: boolean): unknown;
    toBuffer(value: unknown): Buffer;
    /** Whether `value` can be written as this type (test input: `local/encode.ts`). */
    isValid(value: unknown): boolean;
  }
  interface AvroField {
    getName(): string;
    getType(): AvroType;
  }
  /** The type classes, for telling a parsed type's kind (`instanceof`) and walking it with their getters. */
  interface AvroTypeClasses {
    readonly ArrayType: abstract new (...args: never[]) => AvroType & { getItemsType(): AvroType };
    readonly MapType: abstract new (...args: never[]) => AvroType & { getValuesType(): AvroType };
    readonly RecordType: abstract new (
      ...args: never[]
    ) => AvroType & { getName(): string; getFields(): AvroField[] };
    readonly UnionType: abstract new (...args: never[]) => AvroType & { getTypes(): AvroType[] };
    readonly NullType: abstract new (...args: never[]) => AvroType;
  }
  const schemas: {
    createType(schema: unknown, opts?: Record<string, unknown>): AvroType;
    readonly types: AvroTypeClasses;
  };
  export = schemas;
}

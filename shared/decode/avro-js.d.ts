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
  }
  const schemas: { createType(schema: unknown, opts?: Record<string, unknown>): AvroType };
  export = schemas;
}

/**
 * A definition made with `defineTransform` (api.ts) as the processor's internal {@link Transform}: the record's key
 * and value decoded with the declared formats (registry schemas resolved once per batch in `prepare`), the user's
 * function called, its result checked — rows against the declared schema — and turned into a
 * {@link TransformResult}. Every per-record problem becomes `poison` with its reason (L1); a thrown error other than
 * a {@link RejectRecord} is left to `evaluateRecord`, which dead-letters it as `transform <name> threw …`.
 */
import {
  createFieldDecoder,
  type DecodeDependencies,
  loadSchemaCodecs,
  needsSchemaCodecs,
} from '../decode/decoders.ts';
import type { DecodedRecord } from '../kafka/record.ts';
import {
  type AnyTransformDefinition,
  RejectRecord,
  type TransformInput,
  type TransformOutput,
} from './api.ts';
import { compileRowCheck } from './rows.ts';
import type { StateDelta, Transform, TransformResult } from './types.ts';

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const poison = (error: string): TransformResult => ({ kind: 'poison', error });

/** A state update with `fields` and `add` left out given as empty, as the processor's deltas always have them. */
function withDefaults(update: unknown): unknown {
  if (!isPlainObject(update)) return update;
  return {
    ...update,
    fields: update.fields === undefined ? {} : update.fields,
    add: update.add === undefined ? {} : update.add,
  };
}

/** The user's function with its type parameters erased: the adapter checks what it returns at run time. */
type ErasedTransform = (record: TransformInput<unknown, unknown>) => TransformOutput<unknown> | Error;

/** What the decoders reach outside through (registry fetch, Glue lookups, clock); defaults as `createFieldDecoder`'s. */
export type AdapterDependencies = Omit<DecodeDependencies, 'setting'>;

/**
 * Loads what the definition's formats need beyond the always-present ones (the Avro and Protobuf codecs), so that
 * {@link toTransform} can build its decoders; does nothing for string, JSON and bytes. Anything that imported
 * `shared/decode/index.ts` has every codec already; the stock processor awaits this at init instead.
 */
export async function loadDecoders(definition: AnyTransformDefinition): Promise<void> {
  if (needsSchemaCodecs(definition.key) || needsSchemaCodecs(definition.value)) await loadSchemaCodecs();
}

/**
 * The definition in the processor's form. Decoders are built here, so an unsupported or malformed format fails
 * now (when the transform is loaded), naming `<name>.key` or `<name>.value`. An Avro or Protobuf format needs
 * its codecs loaded first ({@link loadDecoders}), else `SchemaCodecsNotLoadedError`.
 */
export function toTransform(definition: AnyTransformDefinition, deps: AdapterDependencies = {}): Transform {
  const { name } = definition;
  const keyDecoder = createFieldDecoder(definition.key, { ...deps, setting: `transform ${name}: key` });
  const valueDecoder = createFieldDecoder(definition.value, { ...deps, setting: `transform ${name}: value` });
  const checkRow = compileRowCheck(definition.columns);
  const user = definition.transform as unknown as ErasedTransform;
  const jsonValues = definition.value.format === 'json';

  function resultOf(record: DecodedRecord, key: unknown, value: unknown): TransformResult {
    let output: TransformOutput<unknown> | Error;
    try {
      output = user.call(definition, {
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        key,
        value,
        headers: record.headers,
      });
    } catch (error) {
      if (error instanceof RejectRecord) return poison(error.message);
      throw error;
    }
    if (output instanceof RejectRecord) return poison(output.message);
    if (output instanceof Error)
      return poison(`transform ${name} returned ${output.name}: ${output.message}`);
    if (!isPlainObject(output)) return poison(`transform ${name} returned neither an object nor an Error`);
    if (typeof output.then === 'function') {
      return poison(`transform ${name} returned a Promise: transforms are synchronous`);
    }
    const rows: unknown = output.rows ?? [];
    if (!Array.isArray(rows)) return poison(`transform ${name} returned rows that are not an array`);
    for (const [index, row] of rows.entries()) {
      if (!isPlainObject(row)) return poison(`transform ${name}: row ${index} is not an object`);
      const problem = checkRow(row);
      if (problem !== undefined) return poison(`transform ${name}: row ${index}: ${problem}`);
    }
    const { idempotencyKey } = output;
    if (idempotencyKey !== undefined && typeof idempotencyKey !== 'string') {
      return poison(`transform ${name} returned an idempotencyKey that is not a string`);
    }
    const state: unknown = output.state ?? [];
    return {
      kind: 'ok',
      rows: rows as Record<string, unknown>[],
      // The shape of each delta is checked by evaluateRecord, as for every transform; an operation left out is none.
      state: (Array.isArray(state) ? state.map(withDefaults) : state) as readonly StateDelta[],
      ...(jsonValues && isPlainObject(value) ? { body: value } : {}),
      ...(idempotencyKey === undefined ? {} : { idempotencyKey }),
    };
  }

  return {
    name,
    valueFormat: definition.value.format,
    async prepare(records) {
      await Promise.all([
        keyDecoder.prepare(records.map((record) => record.rawKey)),
        valueDecoder.prepare(records.map((record) => record.rawValue)),
      ]);
    },
    apply(record) {
      const key = keyDecoder.decode(record.rawKey);
      if (!key.ok) return poison(`undecodable key: ${key.error}`);
      const value = valueDecoder.decode(record.rawValue);
      if (!value.ok) return poison(`undecodable value: ${value.error}`);
      return resultOf(record, key.value, value.value);
    },
  };
}

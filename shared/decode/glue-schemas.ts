/**
 * Glue Schema Registry lookups for the decoders (`GlueGetSchemaVersion` in `shared/decode/registry.ts`): the
 * schema version a Glue-framed record names, by its id. The Glue client module is loaded on the first lookup, not
 * at cold start: most pipelines never read a Glue-framed record, and those that do pay the load once per
 * container, in the batch that first needs it (the decoder caches each version for the container's life).
 */
import type { GlueClient } from '@aws-sdk/client-glue';
import { regionFromEnv } from '../aws/clients.ts';
import type { GlueGetSchemaVersion, SchemaType } from './registry.ts';

const DATA_FORMATS: Readonly<Record<string, SchemaType>> = {
  AVRO: 'AVRO',
  PROTOBUF: 'PROTOBUF',
  JSON: 'JSON',
};

/** Glue's `GetSchemaVersion` as the decoders want it; `undefined` for a version Glue does not have. */
export function glueSchemaVersionLookup(
  clientOf: () => Promise<GlueClient> = defaultGlueClient,
): GlueGetSchemaVersion {
  let client: Promise<GlueClient> | undefined;
  return async (schemaVersionId) => {
    client ??= clientOf();
    const { GetSchemaVersionCommand } = await import('@aws-sdk/client-glue');
    try {
      const version = await (await client).send(
        new GetSchemaVersionCommand({ SchemaVersionId: schemaVersionId }),
      );
      const dataFormat = DATA_FORMATS[version.DataFormat ?? ''];
      if (version.SchemaDefinition === undefined || dataFormat === undefined) {
        // A version without a definition or of a format we do not decode: the records that name it dead-letter.
        return undefined;
      }
      return { schemaDefinition: version.SchemaDefinition, dataFormat };
    } catch (error) {
      if ((error as Error).name === 'EntityNotFoundException') return undefined;
      throw error;
    }
  };
}

async function defaultGlueClient(): Promise<GlueClient> {
  const { GlueClient } = await import('@aws-sdk/client-glue');
  const region = regionFromEnv();
  return new GlueClient({ ...(region === undefined ? {} : { region }), maxAttempts: 3 });
}

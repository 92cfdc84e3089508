/**
 * The committed output as an engine that lists the bucket sees it (the Athena table), and the switches of the
 * manifest log: for tests of the view of the rows readers show (`shared/replay/current-view.ts`).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import type { AwsClients } from '../../shared/aws/clients.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { type GenerationSwitch, parseGenerationSwitch } from '../../shared/sink/generation-switch.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import { readManifests } from '../../shared/sink/reader.ts';

/** Every switch of the manifest log, in log order. */
export async function switchesOf(
  clients: Pick<AwsClients, 's3'>,
  settings: Settings,
): Promise<GenerationSwitch[]> {
  const switches: GenerationSwitch[] = [];
  for await (const manifest of readManifests({
    s3: clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    for (const change of manifest.generations ?? []) switches.push(parseGenerationSwitch(change));
  }
  return switches;
}

/** Downloads every object under `final/output/` (a listing, as Athena reads it), keys kept as paths; the folder. */
export async function listedObjects(clients: Pick<AwsClients, 's3'>, settings: Settings): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'eos-listed-'));
  const prefix = `${finalPrefix(settings.pipelineId)}output/`;
  let token: string | undefined;
  do {
    const page = await clients.s3.send(
      new ListObjectsV2Command({ Bucket: settings.bucket, Prefix: prefix, ContinuationToken: token }),
    );
    for (const { Key } of page.Contents ?? []) {
      const body = await clients.s3.send(new GetObjectCommand({ Bucket: settings.bucket, Key }));
      const path = join(dir, Key!);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, await body.Body!.transformToByteArray());
    }
    token = page.NextContinuationToken;
  } while (token !== undefined);
  return dir;
}

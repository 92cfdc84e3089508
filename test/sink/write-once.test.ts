/**
 * Every write under a pipeline's `final/` and `_manifests/` is write-once (`If-None-Match: *`): the bucket may
 * refuse any other, and S3 then keeps the first bytes of a key whatever a retry, a zombie or a race sends later.
 * Against the local parts, whose S3 server answers 412 as S3 does; the calls are recorded on the clients of the
 * processor and the coordinator as they go out.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { DeliveryGuarantee } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix, manifestsPrefix } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { StagedWriter } from '../../shared/sink/staged-writer.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('once');
});

interface SentWrite {
  readonly command: string;
  readonly key: string;
  readonly ifNoneMatch: unknown;
}

/** Clients that record every S3 write they send (put, copy, multipart completion). */
function recordingClients(sent: SentWrite[]): AwsClients {
  const clients = createAwsClients();
  clients.s3.middlewareStack.add(
    (next, context) => async (args) => {
      const command = String(context.commandName);
      if (/^(PutObject|CopyObject|CompleteMultipartUpload)Command$/.test(command)) {
        const input = args.input as { Key?: string; IfNoneMatch?: unknown };
        sent.push({ command, key: String(input.Key), ifNoneMatch: input.IfNoneMatch });
      }
      return next(args);
    },
    { step: 'initialize', name: 'recordWrites' },
  );
  return clients;
}

async function keysUnder(prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const object of listObjects(res.clients.s3, res.bucket, prefix)) keys.push(object.key);
  return keys;
}

describe('writes under final/ and _manifests/ carry If-None-Match: *', () => {
  it.each<DeliveryGuarantee>(['exactly-once', 'at-least-once', 'none'])(
    '%s: every put, copy and completion the processor and the coordinator send there is conditional',
    async (deliveryGuarantee) => {
      const settings = settingsIn(res, 'once', { deliveryGuarantee });
      const sent: SentWrite[] = [];
      const clients = recordingClients(sent);
      const processor = createProcessor({ settings, clients });
      await processor.processEvent(mskEvent(orderRecords(0, 0, 5)));
      await processor.processEvent(mskEvent(orderRecords(1, 0, 3)));
      if (deliveryGuarantee === 'exactly-once') {
        const local = createLocalCoordinator({ settings, clients, clock: new ManualClock(Date.now()) });
        expect((await local.runCheckpoint()).status).toBe('committed');
      }
      const final = finalPrefix(settings.pipelineId);
      const manifests = manifestsPrefix(settings.pipelineId);
      const committed = sent.filter(
        (write) => write.key.startsWith(final) || write.key.startsWith(manifests),
      );
      // Something was written there (else the check below proves nothing), and all of it conditionally.
      expect(committed.some((write) => write.key.startsWith(final))).toBe(true);
      if (deliveryGuarantee === 'exactly-once') {
        expect(committed.some((write) => write.key.startsWith(manifests))).toBe(true);
      }
      expect(committed.filter((write) => write.ifNoneMatch !== '*')).toEqual([]);
      expect((await keysUnder(final)).length).toBeGreaterThan(0);
    },
  );
});

describe('the staged writer (processor) never replaces an object', () => {
  it('a put onto a key that already holds an object leaves its bytes; the put itself succeeds (its own retry)', async () => {
    const settings = settingsIn(res, 'once', { deliveryGuarantee: 'at-least-once' });
    const key = `${finalPrefix(settings.pipelineId)}orders/0/00000000000000000000-00000000000000000004.a1.ndjson`;
    const writer = new StagedWriter(res.clients.s3, res.bucket);
    const first = encodeNdjson([{ n: 1 }], false);
    await writer.put(key, first);
    await writer.put(key, encodeNdjson([{ n: 2 }], false));
    expect(await getBytes(res.clients.s3, res.bucket, key)).toEqual(first.body);
  });
});

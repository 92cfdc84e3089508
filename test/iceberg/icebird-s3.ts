/**
 * icebird fetches `s3://<bucket>/<key>` as `https://<bucket>.s3.amazonaws.com/<key>` with the global `fetch`. This
 * `fetch` answers those requests from the local S3 server instead, through the AWS SDK (ranges included, as S3
 * does), so that icebird reads exactly what the code under test wrote there. Everything else is refused.
 */
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { isNotFound } from '../../shared/sink/objects.ts';

const S3_HOST = /^([a-z0-9.-]+)\.s3\.amazonaws\.com$/;

export function localS3Fetch(s3: S3Client): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const bucket = S3_HOST.exec(url.hostname)?.[1];
    if (!bucket) throw new Error(`icebird fetched ${url.href}, which is no S3 object`);
    const key = decodeURIComponent(url.pathname.slice(1));
    const range = new Headers(init?.headers).get('Range') ?? undefined;
    try {
      const object = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key, Range: range }));
      const bytes = await object.Body!.transformToByteArray();
      return new Response(bytes, { status: range ? 206 : 200 });
    } catch (error) {
      if (isNotFound(error)) return new Response('not found', { status: 404, statusText: 'Not Found' });
      throw error;
    }
  };
}

/**
 * AWS client construction. Endpoints come from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`
 * variables, which the SDK reads itself, and from nothing else: the same code runs against DynamoDB Local and an
 * S3-compatible server here, LocalStack elsewhere, and AWS in Lambda.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';

export interface AwsClients {
  readonly dynamodb: DynamoDBClient;
  readonly s3: S3Client;
}

/** True when an S3 endpoint other than AWS's is configured: such servers want path-style addressing. */
function customS3Endpoint(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL);
}

export function createAwsClients(env: NodeJS.ProcessEnv = process.env): AwsClients {
  const region = env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1';
  return {
    dynamodb: new DynamoDBClient({ region, maxAttempts: 3 }),
    s3: new S3Client({
      region,
      maxAttempts: 3,
      forcePathStyle: customS3Endpoint(env),
      // The staged writer sends its own SHA-256 and MD5; the SDK's default CRC trailers would make it stream
      // with aws-chunked encoding, which some S3-compatible servers store verbatim.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    }),
  };
}

/** The ledger's document client: plain JS values in and out; undefined attributes are left out of items. */
export function ledgerDocumentClient(dynamodb: DynamoDBClient): DynamoDBDocumentClient {
  return DynamoDBDocumentClient.from(dynamodb, { marshallOptions: { removeUndefinedValues: true } });
}

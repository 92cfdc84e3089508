/**
 * AWS client construction. Region and credentials come from the standard AWS chain, as the AWS CLI's do:
 * `AWS_REGION` (or `AWS_DEFAULT_REGION`), else the profile's region in the config files (`AWS_PROFILE`,
 * `~/.aws/config`); there is no built-in default region, so a machine with none set gets the SDK's "Region is
 * missing" on the first call instead of silently talking to us-east-1 (the CLI turns it into exit 3). Lambda
 * always sets `AWS_REGION`.
 *
 * Endpoints come from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>` variables, which the SDK
 * reads itself, or from an explicit `endpoint` (the CLI's `--endpoint`): the same code runs against DynamoDB
 * Local and an S3-compatible server here, LocalStack elsewhere, and AWS in Lambda.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';

export interface AwsClients {
  readonly dynamodb: DynamoDBClient;
  readonly s3: S3Client;
}

export interface AwsClientOptions {
  /** One endpoint for every service (LocalStack's edge URL); wins over the `AWS_ENDPOINT_URL*` variables. */
  readonly endpoint?: string;
}

/** True when an S3 endpoint other than AWS's is configured: such servers want path-style addressing. */
function customS3Endpoint(env: NodeJS.ProcessEnv, options: AwsClientOptions): boolean {
  return Boolean(options.endpoint ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL);
}

/**
 * The region named by the environment, if any. `undefined` lets the SDK resolve it along its chain (the profile's
 * config file); `AWS_DEFAULT_REGION`, which the SDK for JavaScript does not read, is honoured as the AWS CLI does.
 */
export function regionFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.AWS_REGION || env.AWS_DEFAULT_REGION || undefined;
}

export function createAwsClients(
  env: NodeJS.ProcessEnv = process.env,
  options: AwsClientOptions = {},
): AwsClients {
  const region = regionFromEnv(env);
  const common = {
    maxAttempts: 3,
    ...(region === undefined ? {} : { region }),
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
  };
  return {
    dynamodb: new DynamoDBClient(common),
    s3: new S3Client({
      ...common,
      forcePathStyle: customS3Endpoint(env, options),
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

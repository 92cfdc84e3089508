/**
 * AWS client construction. Region and credentials come from the standard AWS chain, as the AWS CLI's do:
 * `AWS_REGION` (or `AWS_DEFAULT_REGION`), else the profile's region in the config files (`AWS_PROFILE`,
 * `~/.aws/config`); there is no built-in default region, so a machine with none set gets the SDK's "Region is
 * missing" on the first call instead of silently talking to us-east-1 (the CLI turns it into exit 3). Lambda
 * always sets `AWS_REGION`.
 *
 * Endpoints come from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>` variables or from the CLI's
 * flags, a service's own before the one for all (`serviceEndpoint`): the same code runs against DynamoDB Local and
 * an S3-compatible server here, LocalStack elsewhere, and AWS in Lambda. A failed call's error carries its service
 * and endpoint (`failedCallTarget`), so that a message can say which of them answered.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { type AwsService, type FailedCallTarget, tagWithTarget } from './call-target.ts';

export { type AwsService, type FailedCallTarget, failedCallTarget } from './call-target.ts';

export interface AwsClients {
  readonly dynamodb: DynamoDBClient;
  readonly s3: S3Client;
}

export interface AwsClientOptions {
  /** One endpoint for every service (LocalStack's edge URL); wins over the `AWS_ENDPOINT_URL*` variables. */
  readonly endpoint?: string;
  /** A service's own endpoint (the CLI's `--dynamodb-endpoint`, `--s3-endpoint`): wins over everything else. */
  readonly endpoints?: { readonly dynamodb?: string; readonly s3?: string };
}

/**
 * A service's endpoint, flags before variables as the AWS CLI has it: its own option, else the one endpoint for all,
 * else its own variable (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`), else `AWS_ENDPOINT_URL`; undefined:
 * AWS's own.
 */
export function serviceEndpoint(
  service: AwsService,
  env: NodeJS.ProcessEnv = process.env,
  options: AwsClientOptions = {},
): string | undefined {
  const own = service === 'S3' ? options.endpoints?.s3 : options.endpoints?.dynamodb;
  const variable = service === 'S3' ? env.AWS_ENDPOINT_URL_S3 : env.AWS_ENDPOINT_URL_DYNAMODB;
  return own || options.endpoint || variable || env.AWS_ENDPOINT_URL || undefined;
}

type Stack = { add(middleware: unknown, options: Record<string, unknown>): void };

function tagFailures(client: { middlewareStack: unknown }, target: FailedCallTarget): void {
  (client.middlewareStack as Stack).add(
    (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      try {
        return await next(args);
      } catch (error) {
        throw tagWithTarget(error, target);
      }
    },
    { step: 'initialize', name: 'eosFailedCallTarget', priority: 'high' },
  );
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
  const common = { maxAttempts: 3, ...(region === undefined ? {} : { region }) };
  const dynamodbEndpoint = serviceEndpoint('DynamoDB', env, options);
  const s3Endpoint = serviceEndpoint('S3', env, options);
  const dynamodb = new DynamoDBClient({
    ...common,
    ...(dynamodbEndpoint === undefined ? {} : { endpoint: dynamodbEndpoint }),
  });
  tagFailures(dynamodb, { service: 'DynamoDB', endpoint: dynamodbEndpoint });
  const s3 = new S3Client({
    ...common,
    ...(s3Endpoint === undefined ? {} : { endpoint: s3Endpoint }),
    // Servers other than AWS's want path-style addressing.
    forcePathStyle: s3Endpoint !== undefined,
    // The staged writer sends its own SHA-256 and MD5; the SDK's default CRC trailers would make it stream
    // with aws-chunked encoding, which some S3-compatible servers store verbatim.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  tagFailures(s3, { service: 'S3', endpoint: s3Endpoint });
  return { dynamodb, s3 };
}

/** The ledger's document client: plain JS values in and out; undefined attributes are left out of items. */
export function ledgerDocumentClient(dynamodb: DynamoDBClient): DynamoDBDocumentClient {
  return DynamoDBDocumentClient.from(dynamodb, { marshallOptions: { removeUndefinedValues: true } });
}

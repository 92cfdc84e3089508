/**
 * Where an `eos local` run's DynamoDB and S3 are: existing endpoints named by flags or variables (LocalStack,
 * DynamoDB Local and an S3 server started apart), else the parts the run starts itself.
 */
import { OptionError } from '../local/errors.ts';
import { operatorEnvironment } from './environment.ts';
import { endpointUrl } from './options.ts';

export type PartsPlan =
  | { readonly kind: 'start' }
  | { readonly kind: 'existing'; readonly dynamodb: string; readonly s3: string };

/** The endpoint flags of `eos local`. */
export interface EndpointFlags {
  readonly endpoint?: string;
  readonly dynamodbEndpoint?: string;
  readonly s3Endpoint?: string;
}

/**
 * Per service: its own flag, then `--endpoint`, then `AWS_ENDPOINT_URL_DYNAMODB`/`AWS_ENDPOINT_URL_S3`, then
 * `AWS_ENDPOINT_URL` (the SDK's own variables, so a shell set up for LocalStack runs against it). One of the two
 * named alone is a usage error: half a run against an existing server and half against a fresh one would prove
 * nothing.
 */
export function partsPlan(options: EndpointFlags, env: NodeJS.ProcessEnv): PartsPlan {
  const environment = operatorEnvironment(env);
  const common = options.endpoint;
  const dynamodb =
    options.dynamodbEndpoint ??
    common ??
    environment.serviceEndpoint('dynamodb') ??
    environment.endpoint(undefined);
  const s3 =
    options.s3Endpoint ?? common ?? environment.serviceEndpoint('s3') ?? environment.endpoint(undefined);
  if (dynamodb === undefined && s3 === undefined) return { kind: 'start' };
  if (dynamodb === undefined || s3 === undefined) {
    const missing = dynamodb === undefined ? '--dynamodb-endpoint' : '--s3-endpoint';
    throw new OptionError(missing, 'is needed too (or --endpoint for both): both services or neither');
  }
  for (const [flag, url] of [
    ['--dynamodb-endpoint', dynamodb],
    ['--s3-endpoint', s3],
  ] as const) {
    try {
      endpointUrl(url);
    } catch (error) {
      throw new OptionError(flag, (error as Error).message);
    }
  }
  return { kind: 'existing', dynamodb, s3 };
}

/**
 * The environment for existing endpoints. Credentials: the chain's when the shell names any (a LocalStack that
 * enforces IAM), else the local ones, which LocalStack, DynamoDB Local and the S3 server here accept. Region: the
 * shell's, else us-east-1 (a local endpoint serves any region; a local run must not need one set).
 */
export function existingPartsEnv(
  plan: Extract<PartsPlan, { kind: 'existing' }>,
  env: NodeJS.ProcessEnv,
  localCredentials: { readonly accessKeyId: string; readonly secretAccessKey: string },
): Record<string, string> {
  const environment = operatorEnvironment(env);
  return {
    AWS_ENDPOINT_URL_DYNAMODB: plan.dynamodb,
    AWS_ENDPOINT_URL_S3: plan.s3,
    AWS_REGION: environment.region() ?? 'us-east-1',
    ...(environment.namesCredentials()
      ? {}
      : {
          AWS_ACCESS_KEY_ID: localCredentials.accessKeyId,
          AWS_SECRET_ACCESS_KEY: localCredentials.secretAccessKey,
        }),
  };
}

/**
 * The operator environment of the `eos` commands: which ledger table, bucket and pipeline a command works on,
 * which endpoints and region its AWS clients use. Every command resolves them here, so that one shell means one
 * pipeline whatever the command. The rule is the same for each: the flag, else its variable, where an empty
 * variable counts as unset (as the processor reads its `EOS_*` settings), else the default.
 *
 * The processor's own settings (`EOS_TRANSFORM`, `EOS_OUTPUT_FORMAT`, …) are read by `settingsFromEnv` from the
 * variables this holds; `withSettingFlags` lays a command's flags over them.
 */
import { InvalidArgumentError } from 'commander';
import { DEFAULT_PIPELINE_ID } from '../shared/config/pipeline-id.ts';
import { endpointUrl } from './options.ts';

/** The pipeline id when neither `--pipeline` nor `EOS_PIPELINE_ID` names one. */
export { DEFAULT_PIPELINE_ID };

export type Service = 'dynamodb' | 's3';

/** The processor settings a command's flags can set, by their variable. */
export interface SettingFlags {
  readonly table?: string | undefined;
  readonly bucket?: string | undefined;
  readonly pipeline?: string | undefined;
  readonly transform?: string | undefined;
}

export interface OperatorEnvironment {
  /** The variables themselves: what the AWS SDK clients read (credentials, per-service endpoints). */
  readonly variables: NodeJS.ProcessEnv;
  /** `--table`, else `$EOS_LEDGER_TABLE`. */
  table(flag?: string): string | undefined;
  /** {@link table}, a usage error when neither is given. */
  requiredTable(flag?: string): string;
  /** `--bucket`, else `$EOS_BUCKET`. */
  bucket(flag?: string): string | undefined;
  /** {@link bucket}, a usage error when neither is given; `alternative` names another flag that would do. */
  requiredBucket(flag?: string, alternative?: string): string;
  /** `--pipeline`, else `$EOS_PIPELINE_ID`, else {@link DEFAULT_PIPELINE_ID}. */
  pipelineId(flag?: string): string;
  /**
   * `--endpoint`, else `AWS_ENDPOINT_URL` (validated as the flag is, so a typo in the variable is a usage error,
   * not an unreachable host). `undefined`: AWS, or the SDK's per-service variables.
   */
  endpoint(flag?: string): string | undefined;
  /** `AWS_ENDPOINT_URL_DYNAMODB` or `AWS_ENDPOINT_URL_S3`: the SDK's per-service endpoint variables. */
  serviceEndpoint(service: Service): string | undefined;
  /** A cluster's own region (from its ARN), else `AWS_REGION`, else `AWS_DEFAULT_REGION` (as the AWS CLI). */
  region(clusterArn?: string): string | undefined;
  /** Whether the shell names credentials of its own (keys or a profile) rather than leaving them to the chain. */
  namesCredentials(): boolean;
  /** The variables with the flags given laid over their `EOS_*` settings, the pipeline id always resolved. */
  withSettingFlags(flags: SettingFlags): NodeJS.ProcessEnv;
}

/** An MSK cluster's region, from its ARN. */
export function regionOf(arn: string): string | undefined {
  return /^arn:[^:]+:kafka:([^:]+):/.exec(arn)?.[1];
}

export function operatorEnvironment(variables: NodeJS.ProcessEnv = process.env): OperatorEnvironment {
  const variable = (name: string): string | undefined => variables[name] || undefined;
  const table = (flag?: string) => flag ?? variable('EOS_LEDGER_TABLE');
  const bucket = (flag?: string) => flag ?? variable('EOS_BUCKET');
  const pipelineId = (flag?: string) => flag ?? variable('EOS_PIPELINE_ID') ?? DEFAULT_PIPELINE_ID;
  return {
    variables,
    table,
    requiredTable(flag) {
      const name = table(flag);
      if (!name) throw new InvalidArgumentError('--table is required (or set EOS_LEDGER_TABLE)');
      return name;
    },
    bucket,
    requiredBucket(flag, alternative) {
      const name = bucket(flag);
      if (name) return name;
      const flags = alternative === undefined ? '--bucket' : `--bucket or ${alternative}`;
      throw new InvalidArgumentError(`${flags} is required (or set EOS_BUCKET)`);
    },
    pipelineId,
    endpoint(flag) {
      if (flag !== undefined) return flag;
      const fromEnv = variable('AWS_ENDPOINT_URL');
      if (fromEnv === undefined) return undefined;
      try {
        return endpointUrl(fromEnv);
      } catch (error) {
        throw new InvalidArgumentError(`AWS_ENDPOINT_URL: ${(error as Error).message}`);
      }
    },
    serviceEndpoint: (service) => variable(`AWS_ENDPOINT_URL_${service.toUpperCase()}`),
    region: (clusterArn) =>
      (clusterArn === undefined ? undefined : regionOf(clusterArn)) ??
      variable('AWS_REGION') ??
      variable('AWS_DEFAULT_REGION'),
    namesCredentials: () => Boolean(variable('AWS_ACCESS_KEY_ID') ?? variable('AWS_PROFILE')),
    withSettingFlags: (flags) => ({
      ...variables,
      ...(flags.table ? { EOS_LEDGER_TABLE: flags.table } : {}),
      ...(flags.bucket ? { EOS_BUCKET: flags.bucket } : {}),
      ...(flags.transform ? { EOS_TRANSFORM: flags.transform } : {}),
      EOS_PIPELINE_ID: pipelineId(flags.pipeline || undefined),
    }),
  };
}

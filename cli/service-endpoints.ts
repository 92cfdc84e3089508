/**
 * `--dynamodb-endpoint` and `--s3-endpoint` on every command that takes `--endpoint` (but `eos local`, which starts
 * its own parts): one service's endpoint each, for parts a user started apart (a DynamoDB Local here, an S3 server
 * there). They become the SDK's own per-service variables before the command runs; beside them `--endpoint` names
 * the other service only, so that precedence is: a service's flag, `--endpoint`, its variable, `AWS_ENDPOINT_URL`.
 */
import { type Command, Option } from 'commander';
import { endpointUrl } from './options.ts';

const FLAGS = [
  ['dynamodbEndpoint', '--dynamodb-endpoint <url>', 'DynamoDB', 'AWS_ENDPOINT_URL_DYNAMODB'],
  ['s3Endpoint', '--s3-endpoint <url>', 'S3', 'AWS_ENDPOINT_URL_S3'],
] as const;

export function addServiceEndpointFlags(command: Command, env: NodeJS.ProcessEnv = process.env): void {
  if (command.name() === 'local' || !command.options.some((o) => o.long === '--endpoint')) return;
  for (const [, flag, service, variable] of FLAGS) {
    command.addOption(
      new Option(flag, `the ${service} endpoint alone (default: --endpoint, else $${variable})`).argParser(
        endpointUrl,
      ),
    );
  }
  command.hook('preAction', (self) => {
    const options = self.opts<{ endpoint?: string; dynamodbEndpoint?: string; s3Endpoint?: string }>();
    if (options.dynamodbEndpoint === undefined && options.s3Endpoint === undefined) return;
    // Each service's endpoint settled into its own variable; the ones for all are spent.
    for (const [key, , , variable] of FLAGS) {
      const value = options[key] ?? options.endpoint ?? env[variable] ?? env.AWS_ENDPOINT_URL;
      if (value !== undefined) env[variable] = value;
    }
    delete env.AWS_ENDPOINT_URL;
    self.setOptionValue('endpoint', undefined);
  });
}

/**
 * AWS clients for a coordinator under test whose S3 and DynamoDB calls pass a hook before and after they are sent:
 * how the adversarial tests crash, pause or interleave a step at an exact call (a throw in 'before' replaces the
 * call's answer).
 */
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';

export type ServiceHook = (
  service: 's3' | 'dynamodb',
  command: string,
  input: Record<string, unknown>,
  phase: 'before' | 'after',
) => Promise<void>;

/** Fresh clients whose S3 and DynamoDB calls pass `hook` before and after they are sent. */
export function hookedClients(hook: ServiceHook): AwsClients {
  const clients = createAwsClients();
  for (const service of ['s3', 'dynamodb'] as const) {
    // biome-ignore lint/suspicious/noExplicitAny: both clients have a middleware stack of the same shape
    (clients[service] as any).middlewareStack.add(
      // biome-ignore lint/suspicious/noExplicitAny: middleware signature
      (next: any, context: any) => async (args: any) => {
        const input = args.input as Record<string, unknown>;
        const command = String(context.commandName);
        await hook(service, command, input, 'before');
        const result = await next(args);
        await hook(service, command, input, 'after');
        return result;
      },
      { step: 'initialize', name: 'testServiceHook' },
    );
  }
  return clients;
}

/**
 * The checkpoint coordinator's Lambda handlers: one per step of the state machine (`shared/coordinator`), each a
 * thin middy wrapper that validates the payload and calls the protocol. Settings come from `EOS_*` variables.
 * A thrown error's `name` becomes the Step Functions error name (`TransientAwsError` is retried in place; the
 * rest, before the decision, Catch into abort).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import {
  type Coordinator,
  type CoordinatorLog,
  createCoordinator,
} from '../shared/coordinator/coordinator.ts';
import {
  abortInputSchema,
  beginInputSchema,
  checkpointRefSchema,
  shardInputSchema,
} from '../shared/coordinator/messages.ts';

const logger = new Logger({ serviceName: 'eos-coordinator' });

const log: CoordinatorLog = {
  info: (message, extra) => logger.info(message, extra ?? {}),
  error: (message, extra) => logger.error(message, extra ?? {}),
};

let coordinator: Coordinator | undefined;

/** Built on first use, so that a bad setting fails the invocation with an error that names it. */
function core(): Coordinator {
  coordinator ??= createCoordinator({ settings: settingsFromEnv(), clients: createAwsClients(), log });
  return coordinator;
}

function step<T>(name: string, run: (event: unknown) => Promise<T>) {
  return middy(async (event: unknown): Promise<T> => {
    logger.appendKeys({
      step: name,
      checkpointId: (event as { checkpointId?: unknown } | null)?.checkpointId,
    });
    try {
      return await run(event);
    } catch (error) {
      logger.error(`coordinator step ${name} failed`, error as Error);
      throw error;
    }
  });
}

export const begin = step('begin', (event) => core().begin(beginInputSchema.parse(event)));
export const prepare = step('prepare', (event) => core().prepare(shardInputSchema.parse(event)));
export const decide = step('decide', (event) => core().decide(checkpointRefSchema.parse(event)));
export const promote = step('promote', (event) => core().promote(shardInputSchema.parse(event)));
export const commit = step('commit', (event) => core().commit(checkpointRefSchema.parse(event)));
export const cleanup = step('cleanup', (event) => core().cleanup(shardInputSchema.parse(event)));
export const abort = step('abort', (event) => core().abort(abortInputSchema.parse(event)));

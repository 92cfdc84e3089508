/**
 * The processor Lambda: a thin middy handler over `shared/processor`. Settings and clients are built once per
 * container (a malformed setting fails the cold start with a message naming it); the processor instance is kept
 * warm so that its cached fences save a read per batch.
 */
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import { type BatchReport, createProcessor } from '../shared/processor/processor.ts';

const processor = createProcessor({ settings: settingsFromEnv(), clients: createAwsClients() });

/** Throws on any transient failure so that the event source mapping retries the whole batch. */
export const handler = middy().handler(
  async (event: unknown): Promise<BatchReport> => processor.processEvent(event),
);

/**
 * Starts the real local parts once for the whole test run (DynamoDB Local and the S3 server) and hands their
 * endpoints to every test worker through the standard AWS_ENDPOINT_URL_* variables.
 */
import type { TestProject } from 'vitest/node';
import { type LocalParts, startLocalParts } from '../../local/parts.ts';

let parts: LocalParts | undefined;

export async function setup(_project: TestProject): Promise<void> {
  // Endpoints given from outside (LocalStack, say: the README) are used as they are.
  if (process.env.AWS_ENDPOINT_URL_DYNAMODB && process.env.AWS_ENDPOINT_URL_S3) return;
  parts = await startLocalParts();
  Object.assign(process.env, parts.env);
}

export async function teardown(): Promise<void> {
  await parts?.stop();
}

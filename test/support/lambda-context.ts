/** A Lambda context for invoking handlers in tests; `functionName` and `awsRequestId` name the invocation. */
import type { Context } from 'aws-lambda';

export function lambdaContext(functionName: string, awsRequestId: string): Context {
  return {
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:eu-west-1:123456789012:function:${functionName}`,
    memoryLimitInMB: '1024',
    awsRequestId,
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'stream',
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => 60_000,
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}

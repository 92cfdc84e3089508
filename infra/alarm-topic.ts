/** Where a pipeline's alarms notify: its SNS topic, and the topic policy that lets exactly its alarms publish. */
import { Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import type { Construct } from 'constructs';

/** The pipeline's alarm topic: encrypted with the pipeline's key when it has one, mailed to `alarmEmail`. */
export function createAlarmTopic(
  scope: Construct,
  options: { readonly pipelineId: string; readonly encryptionKey?: kms.IKey; readonly alarmEmail?: string },
): sns.Topic {
  const topic = new sns.Topic(scope, 'Alarms', {
    displayName: `Exactly-once pipeline ${options.pipelineId} alarms`,
    enforceSSL: true,
    masterKey: options.encryptionKey,
  });
  const stack = Stack.of(scope);
  if (options.encryptionKey) {
    // CloudWatch publishes to the encrypted topic with its own principal.
    // A key that is not this stack's cannot take it: pipelineKey's warning names it.
    options.encryptionKey.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        conditions: { StringEquals: { 'aws:SourceAccount': stack.account } },
      }),
    );
  }
  if (options.alarmEmail) topic.addSubscription(new subscriptions.EmailSubscription(options.alarmEmail));
  return topic;
}

/**
 * A topic policy replaces SNS's default one, and `enforceSSL` writes a topic policy: without this Allow,
 * CloudWatch alarms (not IAM identities of the account) could not publish, and nobody would be notified. It
 * names this pipeline's alarms one by one: a wildcard `eos-orders-*` would also match pipeline `orders-eu`'s.
 */
export function allowAlarmsToPublish(topic: sns.Topic, alarmNames: readonly string[]): void {
  const stack = Stack.of(topic);
  topic.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'AllowPipelineAlarmsToPublish',
      principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
      actions: ['sns:Publish'],
      resources: [topic.topicArn],
      conditions: {
        StringEquals: { 'aws:SourceAccount': stack.account },
        // ARNs built from the names (known at synth), so the policy does not wait on the alarms.
        ArnEquals: {
          'aws:SourceArn': alarmNames.map(
            (name) => `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:${name}`,
          ),
        },
      },
    }),
  );
}

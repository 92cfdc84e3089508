/**
 * {@link OffsetsByTime} from the brokers themselves, through kafkajs's admin client (ListOffsets by timestamp), for
 * `eos replay --from-timestamp`. Only the operator's CLI loads it: no Lambda talks to the brokers (the event source
 * mapping does).
 *
 * Connecting: bootstrap servers given, or read from the MSK cluster (`GetBootstrapBrokers`, the list for the chosen
 * authentication); authentication as the mapping's: MSK IAM (SASL/OAUTHBEARER with a token from AWS's signer
 * library, the shell's credentials), SASL/SCRAM (`EOS_KAFKA_USERNAME`, `EOS_KAFKA_PASSWORD`: never a flag, so a
 * password stays out of shell history), server TLS only, or plaintext (a local broker).
 */
import {
  GetBootstrapBrokersCommand,
  type GetBootstrapBrokersResponse,
  type KafkaClient,
} from '@aws-sdk/client-kafka';
import type { Admin, KafkaConfig } from 'kafkajs';
import {
  BrokersUnavailableError,
  type KafkaAuth,
  type OffsetAtTime,
  type OffsetsAtTime,
  type OffsetsByTime,
  OffsetsByTimeError,
} from './offsets-by-time.ts';

export interface KafkaConnection {
  readonly bootstrapServers: readonly string[];
  readonly auth: KafkaAuth;
  /** The cluster's region: signs the IAM token. */
  readonly region?: string;
  /** Where SCRAM credentials are read (`EOS_KAFKA_USERNAME`, `EOS_KAFKA_PASSWORD`). */
  readonly env: NodeJS.ProcessEnv;
}

/** The part of kafkajs's admin client the lookup uses (a stub stands in for it where no broker runs). */
export type OffsetsAdmin = Pick<Admin, 'fetchTopicOffsets' | 'fetchTopicOffsetsByTimestamp'>;

/** kafkajs errors that mean the brokers cannot be used, not that the input is wrong (kafkajs's own names and types). */
const UNAVAILABLE_NAMES = new Set([
  'KafkaJSConnectionError',
  'KafkaJSConnectionClosedError',
  'KafkaJSRequestTimeoutError',
  'KafkaJSBrokerNotFound',
  'KafkaJSSASLAuthenticationError',
]);

function brokersUnavailable(error: unknown): boolean {
  for (let e = error as { name?: unknown; type?: unknown; originalError?: unknown } | undefined; e; ) {
    if (typeof e.name === 'string' && UNAVAILABLE_NAMES.has(e.name)) return true;
    if (typeof e.type === 'string' && /_(AUTHORIZATION|AUTHENTICATION)_FAILED$/.test(e.type)) return true;
    // kafkajs's retrier wraps the last failure (KafkaJSNumberOfRetriesExceeded: `cause`; older errors: originalError).
    e = (e.originalError ?? (e as { cause?: unknown }).cause) as typeof e;
  }
  return false;
}

/** The lookup over a connected admin client. */
export class KafkaOffsetsByTime implements OffsetsByTime {
  constructor(private readonly admin: OffsetsAdmin) {}

  async offsetsForTimes(topic: string, timestamp: number): Promise<OffsetsAtTime> {
    try {
      // The ends first. kafkajs answers a time after every record with the partition's high watermark, read inside
      // the lookup, so never below these ends: an answer below them is a record that was there at or after the time
      // before the lookup began. An answer at or past them is "none", whether kafkajs's stand-in or a record
      // appended during the command (which may even be stamped before the time): the range then stops at these ends,
      // a snapshot taken before the lookup.
      const ends = await this.admin.fetchTopicOffsets(topic);
      const found = await this.admin.fetchTopicOffsetsByTimestamp(topic, timestamp);
      const endOf = new Map(ends.map((p) => [p.partition, Number(p.high)]));
      const offsets = new Map<number, OffsetAtTime>();
      for (const { partition, offset } of found) {
        const at = Number(offset);
        const end = endOf.get(partition);
        if (!Number.isSafeInteger(at) || end === undefined || !Number.isSafeInteger(end)) {
          throw new OffsetsByTimeError(`the brokers answered ${topic}-${partition} with offset ${offset}`);
        }
        offsets.set(
          partition,
          at >= 0 && at < end ? { offset: at, found: true } : { offset: end, found: false },
        );
      }
      return offsets;
    } catch (error) {
      if (error instanceof OffsetsByTimeError) throw error;
      const message = `the brokers could not give ${topic}'s offsets at ${new Date(timestamp).toISOString()}: ${(error as Error).message}`;
      if (brokersUnavailable(error)) throw new BrokersUnavailableError(message, { cause: error });
      throw new OffsetsByTimeError(message, { cause: error });
    }
  }
}

/** kafkajs's client settings for a connection (no retries to speak of: an operator is waiting). */
export function kafkaConfigOf(connection: KafkaConnection): KafkaConfig {
  const base = {
    clientId: 'eos-replay',
    brokers: [...connection.bootstrapServers],
    connectionTimeout: 10_000,
    requestTimeout: 30_000,
    retry: { retries: 2 },
  };
  switch (connection.auth) {
    case 'plaintext':
      return base;
    case 'tls':
      return { ...base, ssl: true };
    case 'iam': {
      const region = connection.region;
      if (region === undefined) {
        throw new OffsetsByTimeError(
          'MSK IAM authentication needs the cluster region (--cluster-arn, or AWS_REGION)',
        );
      }
      return {
        ...base,
        ssl: true,
        sasl: {
          mechanism: 'oauthbearer',
          oauthBearerProvider: async () => {
            const { generateAuthToken } = await import('aws-msk-iam-sasl-signer-js');
            const { token } = await generateAuthToken({ region });
            return { value: token };
          },
        },
      };
    }
    case 'scram-sha-256':
      return { ...base, ssl: true, sasl: { mechanism: 'scram-sha-256', ...scramCredentials(connection) } };
    case 'scram-sha-512':
      return { ...base, ssl: true, sasl: { mechanism: 'scram-sha-512', ...scramCredentials(connection) } };
  }
}

/** SCRAM's user and password, from the environment only (a flag would leave the password in shell history). */
function scramCredentials(connection: KafkaConnection): { username: string; password: string } {
  const username = connection.env.EOS_KAFKA_USERNAME;
  const password = connection.env.EOS_KAFKA_PASSWORD;
  if (!username || !password) {
    throw new OffsetsByTimeError(
      `--kafka-auth ${connection.auth} reads the credentials from EOS_KAFKA_USERNAME and EOS_KAFKA_PASSWORD: set both`,
    );
  }
  return { username, password };
}

/** The cluster's bootstrap list for an authentication: private first, then public. */
export function bootstrapServersFor(brokers: GetBootstrapBrokersResponse, auth: KafkaAuth): string[] {
  const choices: Record<KafkaAuth, Array<string | undefined>> = {
    iam: [brokers.BootstrapBrokerStringSaslIam, brokers.BootstrapBrokerStringPublicSaslIam],
    'scram-sha-512': [brokers.BootstrapBrokerStringSaslScram, brokers.BootstrapBrokerStringPublicSaslScram],
    'scram-sha-256': [brokers.BootstrapBrokerStringSaslScram, brokers.BootstrapBrokerStringPublicSaslScram],
    tls: [brokers.BootstrapBrokerStringTls, brokers.BootstrapBrokerStringPublicTls],
    plaintext: [brokers.BootstrapBrokerString],
  };
  const found = choices[auth].find((list) => list !== undefined && list !== '');
  if (found === undefined) {
    throw new OffsetsByTimeError(`the cluster offers no bootstrap brokers for --kafka-auth ${auth}`);
  }
  return found.split(',').map((server) => server.trim());
}

/** The cluster's bootstrap servers for `auth` (`kafka:GetBootstrapBrokers`). */
export async function clusterBootstrapServers(
  kafka: Pick<KafkaClient, 'send'>,
  clusterArn: string,
  auth: KafkaAuth,
): Promise<string[]> {
  let brokers: GetBootstrapBrokersResponse;
  try {
    brokers = await kafka.send(new GetBootstrapBrokersCommand({ ClusterArn: clusterArn }));
  } catch (error) {
    throw new OffsetsByTimeError(
      `cannot read the bootstrap brokers of ${clusterArn}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  return bootstrapServersFor(brokers, auth);
}

/** A connected lookup; `close` disconnects it. */
export async function connectOffsetsByTime(
  connection: KafkaConnection,
): Promise<{ readonly offsets: OffsetsByTime; close(): Promise<void> }> {
  const { Kafka, logLevel } = await import('kafkajs');
  const admin = new Kafka({ ...kafkaConfigOf(connection), logLevel: logLevel.NOTHING }).admin();
  try {
    await admin.connect();
  } catch (error) {
    throw new BrokersUnavailableError(
      `cannot connect to ${connection.bootstrapServers.join(',')} (--kafka-auth ${connection.auth}): ${(error as Error).message}`,
      { cause: error },
    );
  }
  return { offsets: new KafkaOffsetsByTime(admin), close: () => admin.disconnect() };
}

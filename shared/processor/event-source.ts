/**
 * The source checks, before any effect and in every delivery guarantee: an event from another cluster than
 * `eventSourceArn` or `bootstrapServers` (when set), or holding a topic outside `topics` (when set), is refused
 * with `EventSourceRejectedError`; a malformed one with `MalformedEventError`. Both reach the observer's
 * `eventRejected` (metric `EventsRejected`). A check of the payload, not authentication.
 */
import type { Settings } from '../config/settings.ts';
import { EventSourceRejectedError, MalformedEventError } from '../errors.ts';
import { type MskEvent, parseMskEvent } from '../kafka/event.ts';
import type { ProcessorObserver } from './observer.ts';

/** The servers of a `bootstrapServers` list, as a set: the same cluster in any order. */
function serverSet(list: string): string {
  return list
    .split(',')
    .map((server) => server.trim().toLowerCase())
    .filter(Boolean)
    .sort()
    .join(',');
}

/**
 * With `eventSourceArn` or `bootstrapServers` configured, an event must come from that MSK cluster (its ARN) or
 * that self-managed cluster (its bootstrap servers); with neither, any source is accepted.
 */
function checkEventSource(
  event: MskEvent,
  settings: Pick<Settings, 'eventSourceArn' | 'bootstrapServers'>,
): void {
  const { eventSourceArn, bootstrapServers } = settings;
  if (eventSourceArn === undefined && bootstrapServers === undefined) return;
  if (eventSourceArn !== undefined && event.eventSourceArn === eventSourceArn) return;
  if (
    bootstrapServers !== undefined &&
    event.eventSource === 'SelfManagedKafka' &&
    serverSet(event.bootstrapServers) === serverSet(bootstrapServers)
  ) {
    return;
  }
  const got = event.eventSourceArn ?? `${event.eventSource} ${event.bootstrapServers}`;
  const allowed = [eventSourceArn, bootstrapServers].filter((v): v is string => v !== undefined);
  throw new EventSourceRejectedError('event-source', got, allowed);
}

/** Parses the event and applies the source checks; reports a rejection before it is thrown. */
export function acceptEvent(
  input: unknown,
  settings: Pick<Settings, 'eventSourceArn' | 'bootstrapServers' | 'topics'>,
  observer: ProcessorObserver | undefined,
): MskEvent {
  try {
    const event = parseMskEvent(input);
    const { topics } = settings;
    checkEventSource(event, settings);
    if (topics !== undefined) {
      for (const records of Object.values(event.records)) {
        const topic = records[0]?.topic;
        if (topic !== undefined && !topics.includes(topic)) {
          throw new EventSourceRejectedError('topic', topic, topics);
        }
      }
    }
    return event;
  } catch (error) {
    if (error instanceof MalformedEventError || error instanceof EventSourceRejectedError) {
      observer?.eventRejected?.(error);
    }
    throw error;
  }
}

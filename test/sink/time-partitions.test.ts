import { describe, expect, it } from 'vitest';
import {
  clampRecordTime,
  InvalidProjectionError,
  InvalidRecordTimeError,
  LATEST_FOLDER_MS,
  PROJECTION_PLACEHOLDERS,
  parseTimeFolder,
  partitionProjection,
  timeFolder,
  timePartitionKeys,
} from '../../shared/sink/time-partitions.ts';

const { dt: DT, hour: HOUR } = PROJECTION_PLACEHOLDERS;
const AT = Date.UTC(2026, 11, 1, 7, 59, 59, 999); // 2026-12-01T07:59:59.999Z

describe('time folders', () => {
  it('spells day and hour folders in UTC with fixed widths', () => {
    expect(timeFolder(AT, 'day')).toBe('dt=2026-12-01');
    expect(timeFolder(AT, 'hour')).toBe('dt=2026-12-01/hour=07');
    expect(timeFolder(AT + 1, 'hour')).toBe('dt=2026-12-01/hour=08');
    expect(timeFolder(Date.UTC(2026, 0, 1) - 1, 'hour')).toBe('dt=2025-12-31/hour=23');
  });

  it('clamps times a four-digit year cannot name, and refuses non-integers', () => {
    expect(timeFolder(-1, 'hour')).toBe('dt=1970-01-01/hour=00');
    expect(timeFolder(LATEST_FOLDER_MS + 1, 'hour')).toBe('dt=9999-12-31/hour=23');
    expect(clampRecordTime(AT)).toBe(AT);
    expect(() => timeFolder(1.5, 'day')).toThrow(InvalidRecordTimeError);
    expect(() => timeFolder(Number.NaN, 'day')).toThrow(InvalidRecordTimeError);
  });

  it('parses exactly what it spells and nothing else', () => {
    expect(parseTimeFolder('dt=2026-12-01/hour=07')).toEqual({
      granularity: 'hour',
      startMs: Date.UTC(2026, 11, 1, 7),
      endMs: Date.UTC(2026, 11, 1, 8) - 1,
    });
    expect(parseTimeFolder('dt=2026-12-01')).toEqual({
      granularity: 'day',
      startMs: Date.UTC(2026, 11, 1),
      endMs: Date.UTC(2026, 11, 2) - 1,
    });
    for (const bad of [
      'dt=2026-12-01/hour=7',
      'dt=2026-12-01/hour=24',
      'dt=2026-02-30',
      'dt=2026-13-01',
      'dt=0099-01-01',
      'dt=2026-12-01/',
      'dt=2026-12-1',
      'date=2026-12-01',
      'dt=2026-12-01/hour=07/x',
    ]) {
      expect(parseTimeFolder(bad), bad).toBeUndefined();
    }
    for (const ms of [0, AT, LATEST_FOLDER_MS]) {
      for (const g of ['day', 'hour'] as const)
        expect(parseTimeFolder(timeFolder(ms, g))?.granularity).toBe(g);
    }
  });

  it('describes the folders to Glue partition projection', () => {
    expect(timePartitionKeys('hour').map((k) => [k.name, k.type])).toEqual([
      ['dt', 'string'],
      ['hour', 'string'],
    ]);
    const hour = partitionProjection('hour', {
      location: 's3://b/orders/final/output/',
      firstDay: '2026-01-01',
    });
    expect(hour).toMatchObject({
      'projection.enabled': 'true',
      'projection.dt.type': 'date',
      'projection.dt.format': 'yyyy-MM-dd',
      'projection.dt.range': '2026-01-01,NOW+1DAYS',
      'projection.hour.type': 'integer',
      'projection.hour.range': '0,23',
      'projection.hour.digits': '2',
      'storage.location.template': `s3://b/orders/final/output/dt=${DT}/hour=${HOUR}/`,
    });
    const day = partitionProjection('day', {
      location: 's3://b/orders/final/output/',
      firstDay: '2026-01-01',
    });
    expect(day['storage.location.template']).toBe(`s3://b/orders/final/output/dt=${DT}/`);
    expect(day['projection.hour.type']).toBeUndefined();
    // The template filled in as Athena does names the folder timeFolder writes.
    const filled = hour['storage.location.template']!.replace(DT, '2026-12-01').replace(HOUR, '07');
    expect(filled).toBe(`s3://b/orders/final/output/${timeFolder(AT, 'hour')}/`);
    expect(() => partitionProjection('day', { location: 's3://b/x', firstDay: '2026-01-01' })).toThrow(
      InvalidProjectionError,
    );
    expect(() => partitionProjection('day', { location: 's3://b/x/', firstDay: '2026-1-1' })).toThrow(
      InvalidProjectionError,
    );
  });
});

import { describe, expect, it } from 'vitest';
import {
  fieldsByPath,
  highestFieldId,
  IcebergSchemaError,
  icebergSchema,
  nameMapping,
  sameFields,
} from '../../shared/iceberg/schema.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'amount', type: 'double', nullable: true },
  { name: 'quantity', type: 'int', nullable: false },
  { name: 'placedAt', type: 'timestamp', nullable: false },
  { name: 'attributes', type: 'json', nullable: true },
];

describe('icebergSchema', () => {
  it('gives the declared columns in order, then the lineage struct, with Iceberg types and ids from 1', () => {
    const { schema, lastColumnId } = icebergSchema(COLUMNS);
    expect(schema).toEqual({
      type: 'struct',
      'schema-id': 0,
      fields: [
        { id: 1, name: 'orderId', required: true, type: 'string' },
        { id: 2, name: 'amount', required: false, type: 'double' },
        { id: 3, name: 'quantity', required: true, type: 'int' },
        { id: 4, name: 'placedAt', required: true, type: 'timestamptz' },
        { id: 5, name: 'attributes', required: false, type: 'string' },
        {
          id: 6,
          name: 'source',
          required: true,
          doc: 'Kafka lineage: topic, partition, offset',
          type: {
            type: 'struct',
            fields: [
              { id: 7, name: 'topic', required: true, type: 'string' },
              { id: 8, name: 'partition', required: true, type: 'int' },
              { id: 9, name: 'offset', required: true, type: 'long' },
            ],
          },
        },
      ],
    });
    expect(lastColumnId).toBe(9);
    expect(highestFieldId(schema.fields)).toBe(9);
  });

  it('adds partition-only columns as optional strings after the lineage struct', () => {
    const { schema } = icebergSchema(COLUMNS.slice(0, 1), { partitionColumns: ['dt', 'hour'] });
    expect(schema.fields.map((field) => [field.id, field.name, field.required])).toEqual([
      [1, 'orderId', true],
      [2, 'source', true],
      [6, 'dt', false],
      [7, 'hour', false],
    ]);
  });

  it('keeps every field id by name across versions and numbers new fields above last-column-id', () => {
    const first = icebergSchema(COLUMNS);
    // amount dropped, a column added, quantity widened to long, attributes reordered first.
    const evolved: ColumnDefinition[] = [
      { name: 'attributes', type: 'json', nullable: true },
      { name: 'orderId', type: 'string', nullable: false },
      { name: 'quantity', type: 'long', nullable: false },
      { name: 'placedAt', type: 'timestamp', nullable: false },
      { name: 'channel', type: 'string', nullable: true },
    ];
    const second = icebergSchema(evolved, { previous: first.schema, lastColumnId: first.lastColumnId });
    const ids = (schema: typeof second.schema) =>
      Object.fromEntries([...fieldsByPath(schema.fields)].map(([path, field]) => [path, field.id]));
    expect(ids(second.schema)).toEqual({
      attributes: 5,
      orderId: 1,
      quantity: 3,
      placedAt: 4,
      channel: 10,
      source: 6,
      'source.topic': 7,
      'source.partition': 8,
      'source.offset': 9,
    });
    expect(second.schema['schema-id']).toBe(1);
    expect(second.lastColumnId).toBe(10);

    // amount comes back: it is a new column now (id 11), never the dropped column's id 2.
    const third = icebergSchema([...evolved, { name: 'amount', type: 'double', nullable: true }], {
      previous: second.schema,
      lastColumnId: second.lastColumnId,
    });
    expect(fieldsByPath(third.schema.fields).get('amount')?.id).toBe(11);
    expect(third.lastColumnId).toBe(11);
  });

  it('does not reuse an id above the previous schema even when last-column-id is not given', () => {
    const first = icebergSchema(COLUMNS);
    const next = icebergSchema([...COLUMNS, { name: 'extra', type: 'boolean', nullable: true }], {
      previous: first.schema,
    });
    expect(fieldsByPath(next.schema.fields).get('extra')?.id).toBe(10);
  });

  it('refuses changes Iceberg readers cannot follow and names equal without case', () => {
    const first = icebergSchema(COLUMNS);
    const widened = icebergSchema(
      COLUMNS.map((column) => (column.name === 'quantity' ? { ...column, type: 'long' as const } : column)),
      { previous: first.schema },
    );
    expect(() => icebergSchema(COLUMNS, { previous: widened.schema })).toThrow(/from long to int/);
    const retyped = COLUMNS.map((column) =>
      column.name === 'orderId' ? { ...column, type: 'long' as const } : column,
    );
    expect(() => icebergSchema(retyped, { previous: first.schema })).toThrow(IcebergSchemaError);
    const required = COLUMNS.map((column) =>
      column.name === 'amount' ? { ...column, nullable: false } : column,
    );
    expect(() => icebergSchema(required, { previous: first.schema })).toThrow(/becomes required/);
    expect(() => icebergSchema([...COLUMNS, { name: 'ORDERID', type: 'string', nullable: false }])).toThrow(
      /one column in Athena/,
    );
    expect(() => icebergSchema(COLUMNS, { partitionColumns: ['Quantity'] })).toThrow(IcebergSchemaError);
  });

  it('compares fields structurally, whatever the schema id', () => {
    const a = icebergSchema(COLUMNS).schema;
    const b = icebergSchema(COLUMNS, { schemaId: 7 }).schema;
    expect(sameFields(a, b)).toBe(true);
    const parsed = JSON.parse(JSON.stringify(b));
    expect(sameFields(a, parsed)).toBe(true);
    expect(sameFields(a, icebergSchema(COLUMNS.slice(1)).schema)).toBe(false);
  });

  it('maps every field, nested ones included, to its name for files written without field ids', () => {
    const { schema } = icebergSchema(COLUMNS.slice(0, 1));
    expect(JSON.parse(nameMapping(schema))).toEqual([
      { 'field-id': 1, names: ['orderId'] },
      {
        'field-id': 2,
        names: ['source'],
        fields: [
          { 'field-id': 3, names: ['topic'] },
          { 'field-id': 4, names: ['partition'] },
          { 'field-id': 5, names: ['offset'] },
        ],
      },
    ]);
  });
});

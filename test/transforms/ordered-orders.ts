/**
 * The `orders` transform with `min`, `max` and `latest` state beside its adds, for the runs that judge them end to
 * end (the local oracle's tests, the chaos test): per customer and currency the smallest and largest amount and
 * the last order id by time. Times are coarse (tenths of a second) so that orders tie and the tie rule decides.
 */
import { ordersTransform } from '../../shared/transforms/orders.ts';
import type { Transform, TransformResult } from '../../shared/transforms/types.ts';

export const orderedOrdersTransform: Transform = {
  name: 'orders-ordered',
  valueFormat: ordersTransform.valueFormat,
  prepare: async (records) => ordersTransform.prepare?.(records),
  apply(record): TransformResult {
    const result = ordersTransform.apply(record);
    if (result.kind !== 'ok') return result;
    const row = result.rows[0] as { orderId: string; amountMinor: number; ts: number };
    return {
      ...result,
      state: result.state.map((delta) => ({
        ...delta,
        min: { smallestMinor: row.amountMinor },
        max: { largestMinor: row.amountMinor },
        latest: { lastOrder: { value: row.orderId, at: Math.floor(row.ts / 100) } },
      })),
    };
  },
};

/** Transforms by name (the `transform` setting). Add yours here. */
import { InvalidSettingError } from '../errors.ts';
import { ordersTransform } from './orders.ts';
import type { Transform } from './types.ts';

const TRANSFORMS: Readonly<Record<string, Transform>> = { orders: ordersTransform };

export function transformNamed(name: string): Transform {
  const transform = TRANSFORMS[name];
  if (!transform) {
    throw new InvalidSettingError(
      'transform',
      `unknown transform "${name}" (known: ${Object.keys(TRANSFORMS).join(', ')})`,
    );
  }
  return transform;
}

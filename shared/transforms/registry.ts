/** The built-in transforms, by the name the `transform` setting gives (`loadTransform` also takes user modules). */
import { UnknownTransformError } from '../errors.ts';
import { toTransform } from './adapter.ts';
import type { AnyTransformDefinition } from './api.ts';
import orders from './orders.ts';
import passthrough from './passthrough.ts';
import type { Transform } from './types.ts';

export const BUILTIN_TRANSFORMS: Readonly<Record<string, AnyTransformDefinition>> = Object.freeze({
  orders: orders as unknown as AnyTransformDefinition,
  passthrough: passthrough as unknown as AnyTransformDefinition,
});

/** The built-in definition of that name; {@link UnknownTransformError} (listing the known ones) otherwise. */
export function builtinDefinition(name: string): AnyTransformDefinition {
  if (!Object.hasOwn(BUILTIN_TRANSFORMS, name)) {
    throw new UnknownTransformError(name, Object.keys(BUILTIN_TRANSFORMS));
  }
  return BUILTIN_TRANSFORMS[name]!;
}

/** The built-in transform of that name, in the processor's form. */
export function builtinTransform(name: string): Transform {
  return toTransform(builtinDefinition(name));
}

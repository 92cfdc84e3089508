/**
 * aws-local-stepfunctions 3.0.0 (the coordinator's local state machine) calls `Promise.withResolvers`, which Node
 * has from 22 on; the tooling here runs on Node 20. Imported first by the `eos` CLI.
 */
type Resolvers<T> = { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void };
const promiseWithResolvers = Promise as unknown as { withResolvers?: <T>() => Resolvers<T> };
if (typeof promiseWithResolvers.withResolvers !== 'function') {
  promiseWithResolvers.withResolvers = <T>(): Resolvers<T> => {
    let resolve!: (v: T) => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

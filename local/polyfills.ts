// aws-local-stepfunctions 3.0.0 uses Promise.withResolvers (Node 22+); the tooling here runs on Node 20.
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

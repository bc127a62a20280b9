// Node 20 has no Promise.withResolvers (Node 22 does); the DevKit's `hooks` test calls it in
// the vitest worker. The servers the suite spawns do not need it.
type Resolvers<T> = {
  promise: Promise<T>;
  resolve: (value: T | PromiseLike<T>) => void;
  reject: (reason?: unknown) => void;
};

const promiseConstructor = Promise as unknown as {
  withResolvers?: <T>() => Resolvers<T>;
};

if (typeof promiseConstructor.withResolvers !== 'function') {
  promiseConstructor.withResolvers = function withResolvers<T>(): Resolvers<T> {
    let resolve!: Resolvers<T>['resolve'];
    let reject!: Resolvers<T>['reject'];
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

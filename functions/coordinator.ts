/** Checkpoint coordinator step handlers (work in progress: the protocol lands in shared/coordinator). */
export const begin = async (): Promise<never> => {
  throw new Error('not implemented yet');
};
export const prepare = begin;
export const decide = begin;
export const promote = begin;
export const commit = begin;
export const cleanup = begin;
export const abort = begin;

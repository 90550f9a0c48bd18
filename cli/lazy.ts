/**
 * A module loaded when a command first uses it, not when the CLI starts: the Temporal SDK, zod, the worker and the
 * workflows load only for the command that runs, so `roundhouse <command> --help` and the CLI's start stay fast
 * (the cold start is measured in BENCHMARKS.md). The commands' modules are declared once, in cli/modules.ts, each
 * beside a type-only import of the same module:
 *
 *   import type * as Context from './context';
 *   context: lazy(() => require('./context') as typeof Context),
 */
export function lazy<T>(load: () => T): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= load());
}

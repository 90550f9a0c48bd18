import { addUsage, emptyUsage, type TokenUsage } from '../config/rules/usage';
import type { OperationHandle, SampleResult, TrainingProvider } from '../providers/types';

export { addUsage, emptyUsage, type TokenUsage };

/**
 * The provider, counting the tokens of what is submitted through it (each key once: a resubmission is the same
 * operation) and of the samples it hands back. What an attempt that dies had processed is not counted.
 */
export function meteredProvider(provider: TrainingProvider): { provider: TrainingProvider; usage(): TokenUsage } {
  const usage = emptyUsage();
  const seen = new Set<string>();
  const once = (key: string, count: () => void) => {
    if (seen.has(key)) return;
    seen.add(key);
    count();
  };
  const inputTokens = (data: { modelInput: number[] }[]) => data.reduce((a, d) => a + d.modelInput.length, 0);
  const counting: Partial<TrainingProvider> = {
    submitForwardBackward: async (...args: Parameters<TrainingProvider['submitForwardBackward']>) => {
      const handle = await provider.submitForwardBackward(...args);
      const [, key, data, options] = args;
      once(`fb\u0000${key}`, () => (usage[options?.forwardOnly ? 'prefill' : 'train'] += inputTokens(data)));
      return handle;
    },
    submitCustomForwardBackward: async (...args: Parameters<TrainingProvider['submitCustomForwardBackward']>) => {
      const handle = await provider.submitCustomForwardBackward(...args);
      once(`fb\u0000${args[1]}`, () => (usage.train += inputTokens(args[2])));
      return handle;
    },
    submitSample: async (...args: Parameters<TrainingProvider['submitSample']>) => {
      const handle = await provider.submitSample(...args);
      once(`sample\u0000${args[1]}`, () => (usage.prefill += args[2].reduce((a, p) => a + p.length, 0)));
      return handle;
    },
    awaitOperation: async <T>(handle: OperationHandle<T>, options?: Parameters<TrainingProvider['awaitOperation']>[1]) => {
      const result = await provider.awaitOperation(handle, options);
      if (handle.kind === 'sample')
        once(`sampled\u0000${handle.idempotencyKey}`, () => {
          for (const r of result as SampleResult[]) for (const s of r.sequences) usage.sample += s.tokens.length;
        });
      return result;
    },
  };
  // Everything else is the provider's own, bound to it.
  const metered = new Proxy(provider, {
    get(target, prop, receiver) {
      if (Object.prototype.hasOwnProperty.call(counting, prop)) return counting[prop as keyof typeof counting];
      const value: unknown = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { provider: metered, usage: () => ({ ...usage }) };
}

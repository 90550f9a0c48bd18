import { RoundhouseFailure } from '../config/rules/failures';
import { addUsage, emptyUsage, tokenCostUsd, type TokenUsage } from '../config/rules/usage';
import type { OperationHandle, SampleResult, TrainingProvider } from '../providers/types';
import type { SpendGuard } from '../workflows/round/contract';

export { addUsage, emptyUsage, type TokenUsage };

/**
 * The provider, counting the tokens of what is submitted through it (each key once: a resubmission is the same
 * operation) and of the samples it hands back. What an attempt that dies had processed is not counted.
 *
 * With a spend guard (a dollar budget on a provider that bills tokens), every operation is priced before it is
 * submitted: its input tokens exactly, a sample's generated tokens at their bound (`n × maxTokens` per prompt, until
 * the answer counts them). One that would take the spend past what is left is not submitted: `BudgetReached`.
 */
export function meteredProvider(provider: TrainingProvider, guard?: SpendGuard): { provider: TrainingProvider; usage(): TokenUsage } {
  const usage = emptyUsage();
  const seen = new Set<string>();
  /** Generated tokens of samples submitted and not answered yet, at their bound. */
  const pending = new Map<string, number>();
  let sampleBound = 0;
  const once = (key: string, count: () => void) => {
    if (seen.has(key)) return;
    seen.add(key);
    count();
  };
  const admit = (key: string, tokens: Partial<TokenUsage>, what: string) => {
    if (!guard || seen.has(key)) return;
    const pendingSample = [...pending.values()].reduce((a, n) => a + n, 0);
    const after = {
      prefill: usage.prefill + (tokens.prefill ?? 0),
      sample: usage.sample + pendingSample + (tokens.sample ?? 0),
      train: usage.train + (tokens.train ?? 0),
    };
    const cost = tokenCostUsd(after, guard.prices);
    if (cost > guard.leftUsd)
      // What this activity had processed goes with the refusal: the round settles it.
      throw new RoundhouseFailure(
        'BudgetReached',
        `dollar budget reached: ${what} would bring this activity's spend to $${cost.toFixed(4)}, past the $${guard.leftUsd.toFixed(4)} left`,
        { usage: { ...usage, sampleBound } },
      );
  };
  const inputTokens = (data: { modelInput: number[] }[]) => data.reduce((a, d) => a + d.modelInput.length, 0);
  const counting: Partial<TrainingProvider> = {
    submitForwardBackward: async (...args: Parameters<TrainingProvider['submitForwardBackward']>) => {
      const [, key, data, options] = args;
      const which = options?.forwardOnly ? 'prefill' : 'train';
      admit(`fb\u0000${key}`, { [which]: inputTokens(data) }, options?.forwardOnly ? 'a forward pass' : 'a forward-backward pass');
      const handle = await provider.submitForwardBackward(...args);
      once(`fb\u0000${key}`, () => (usage[which] += inputTokens(data)));
      return handle;
    },
    submitCustomForwardBackward: async (...args: Parameters<TrainingProvider['submitCustomForwardBackward']>) => {
      admit(`fb\u0000${args[1]}`, { train: inputTokens(args[2]) }, 'a custom forward-backward pass');
      const handle = await provider.submitCustomForwardBackward(...args);
      once(`fb\u0000${args[1]}`, () => (usage.train += inputTokens(args[2])));
      return handle;
    },
    submitSample: async (...args: Parameters<TrainingProvider['submitSample']>) => {
      const [, key, prompts, params, options] = args;
      const bound = prompts.length * (options?.numSamples ?? 1) * params.maxTokens;
      admit(`sample\u0000${key}`, { prefill: prompts.reduce((a, p) => a + p.length, 0), sample: bound }, 'a sampling request');
      const handle = await provider.submitSample(...args);
      once(`sample\u0000${key}`, () => {
        usage.prefill += prompts.reduce((a, p) => a + p.length, 0);
        if (guard) {
          pending.set(key, bound);
          sampleBound += bound;
        }
      });
      return handle;
    },
    awaitOperation: async <T>(handle: OperationHandle<T>, options?: Parameters<TrainingProvider['awaitOperation']>[1]) => {
      const result = await provider.awaitOperation(handle, options);
      if (handle.kind === 'sample')
        once(`sampled\u0000${handle.idempotencyKey}`, () => {
          pending.delete(handle.idempotencyKey);
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
  return { provider: metered, usage: () => ({ ...usage, ...(guard ? { sampleBound } : {}) }) };
}

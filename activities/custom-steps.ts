import type { Datum } from '../providers/types';
import type { SegmentContext, StepKind } from './segment';
import type { StepRecord } from './step-records';

/**
 * A step whose loss is computed off the trainer (DPO in the activity, a user's loss function on a Python worker): its
 * passes' datums and the gradient of the loss with respect to each datum's logprobs, sent with one keyed custom
 * forward-backward per pass (`training.accumulate`). Every attempt computes the same gradients from the same
 * (deduplicated) forwards or the recorded ones, so the custom forward-backward is the same request under the same key.
 */
export interface CustomGradients<R> {
  passes: { datums: Datum[]; gradients: number[][] }[];
  record: R;
}

/** A step's operation key for one of its passes: the first keeps the keys a step always had, later ones add `p<k>`. */
export function passKey(key: SegmentContext['key'], step: number, pass: number, what: string): string {
  return pass === 0 ? key(`s${step}`, what) : key(`s${step}`, `p${pass}`, what);
}

/** The segment driver's view of such a step: computed once per step (memoised until recorded), one pass after another. */
export function customGradientStep<R extends StepRecord>(
  { provider, key }: SegmentContext,
  sessionId: string,
  compute: (step: number) => Promise<CustomGradients<R>>,
): StepKind<R, Record<string, never>> {
  const computed = new Map<number, Promise<CustomGradients<R>>>();
  const stepOf = (step: number) => {
    let pending = computed.get(step);
    if (!pending) computed.set(step, (pending = compute(step)));
    return pending;
  };
  return {
    depth: 1, // the next step's forward needs this step's weights
    async submitForwardBackward(step) {
      const handles = [];
      for (const [pass, { datums, gradients }] of (await stepOf(step)).passes.entries())
        handles.push(
          await provider.submitCustomForwardBackward(sessionId, passKey(key, step, pass, 'custom-forward-backward'), datums, gradients),
        );
      return handles.length === 1 ? handles[0]! : handles;
    },
    async record(step) {
      const { record } = await stepOf(step);
      computed.delete(step);
      return record;
    },
  };
}

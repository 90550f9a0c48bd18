import { lossPerToken } from '../config/rules/loss-units';
import { ROUND_KIND } from '../config/rules/round-kinds';
import { accumulatedRows } from '../config/rules/schedule';
import type { Datum } from '../providers/types';
import { toDatum } from './data';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { createPreparer } from './prepare';
import type { SegmentInput, SegmentResult } from '../workflows/round/contract';
import { trainSegmentOf } from './segment';
import type { StepRecord } from './step-records';

/** SFT: a step is cross-entropy on a batch of prompt/answer rows (answers weighted), pipelined `pipelineDepth` deep. */
export function createSftActivities(deps: ActivityDeps) {
  const { prepared } = createPreparer(deps);

  return {
    /** Trains one segment of SFT steps from the cursor (see activities/segment.ts for the protocol). */
    async trainSegment(input: SegmentInput): Promise<SegmentResult> {
      return atBoundary(async () => {
        const { result } = await trainSegmentOf<StepRecord>(deps, input, async ({ provider, key }) => {
          const p = await prepared(input.spec, input.data);
          const t = input.spec.training;
          const passes = t.accumulate ?? 1;
          // A step's passes (one without accumulation): rows of `batchSize` each.
          const passesOf = (step: number) =>
            accumulatedRows(step, p.train.length, t.batchSize, passes, t.seed).map((rows) => rows.map((r) => p.train[r]!));
          return {
            depth: t.pipelineDepth,
            submitForwardBackward: async (step) => {
              const handles = [];
              for (const [pass, rows] of passesOf(step).entries()) {
                const data: Datum[] = rows.map(toDatum);
                // The first pass keeps the key a step always had.
                const k = pass === 0 ? key(`s${step}`, 'forward-backward') : key(`s${step}`, `p${pass}`, 'forward-backward');
                handles.push(await provider.submitForwardBackward(input.sessionId, k, data));
              }
              return handles.length === 1 ? handles[0]! : handles;
            },
            record: (step, fb, more) => {
              const tokens = passesOf(step)
                .flat()
                .reduce((a, r) => a + r.completionTokens.length, 0);
              // Cross-entropy is a sum on every dialect that has it: the passes' losses add up to the step's.
              const loss = more.reduce((a, f) => a + f.loss, fb.loss);
              return {
                step: step + 1,
                loss,
                tokens,
                lossPerToken: lossPerToken(input.spec.provider.kind, ROUND_KIND.sft.stepLoss(input.spec.round), loss, tokens),
              };
            },
          };
        });
        return result;
      });
    },
  };
}

import { lossPerToken } from '../config/rules/loss-units';
import { ROUND_KIND } from '../config/rules/round-kinds';
import { batchRows } from '../config/rules/schedule';
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
          const rowsOf = (step: number) => batchRows(step, p.train.length, t.batchSize, t.seed).rows.map((r) => p.train[r]!);
          return {
            depth: t.pipelineDepth,
            submitForwardBackward: (step) => {
              const data: Datum[] = rowsOf(step).map(toDatum);
              return provider.submitForwardBackward(input.sessionId, key(`s${step}`, 'forward-backward'), data);
            },
            record: (step, fb) => {
              const tokens = rowsOf(step).reduce((a, r) => a + r.completionTokens.length, 0);
              return {
                step: step + 1,
                loss: fb.loss,
                tokens,
                lossPerToken: lossPerToken(input.spec.provider.kind, ROUND_KIND.sft.stepLoss(input.spec.round), fb.loss, tokens),
              };
            },
          };
        });
        return result;
      });
    },
  };
}

import { addUsage, type TokenUsage } from './usage';
import { joinLocation } from '../config/io/artifacts';
import { lineageParts, roundKey } from '../config/rules/keys';
import { writeJsonAtomic } from './files';
import type { DpoEvaluation, EvaluateDuringInput, EvaluationPoint, PhaseInput } from '../workflows/round/contract';
import { trackEvaluation, type RoundTracking } from './tracking';
import { stepsFolder } from '../config/rules/round-files';

/**
 * Evaluation during training (`evaluation.every`): between two segments, on the session's current weights, the eval
 * loss (forward only; DPO: the eval pairs' loss, preference accuracy and margin) and, every `sampleEvery`-th time,
 * the sampled scorer's metric. Every provider call is keyed by the step (`eval-s<step>`, `sample-s<step>`), so a
 * retried attempt gets the same operations and figures back; the figures are written as a record beside the step
 * records and logged to the tracker with the workflow's timestamp, so a retry logs nothing twice.
 */
/** What the evaluation activity calls: the round's own keyed activities (round.ts, dpo.ts). */
export interface EvaluationParts {
  measureLoss(input: PhaseInput & { which: 'eval' }): Promise<{ perToken: number; usage?: TokenUsage }>;
  evaluateDpo(input: PhaseInput & { referencePath: string }): Promise<DpoEvaluation>;
  saveSamplerWeights(input: { spec: PhaseInput['spec']; sessionId: string; key: string }): Promise<{ checkpointId: string }>;
  sampleAndScore(input: PhaseInput & { outputPath: string }): Promise<{ accuracy: number; usage?: TokenUsage }>;
}

export function createEvaluationActivities(parts: EvaluationParts) {
  return {
    async evaluateDuringTraining(input: EvaluateDuringInput): Promise<EvaluationPoint> {
      const phase = { ...input, label: `eval-s${input.step}` };
      let usage: TokenUsage | undefined;
      const point: EvaluationPoint = { step: input.step, loss: NaN, at: input.at, ...(input.lineage ? { lineage: input.lineage } : {}) };
      if (input.referencePath) {
        const dpo = await parts.evaluateDpo({ ...phase, referencePath: input.referencePath });
        Object.assign(point, { loss: dpo.loss, metric: dpo.accuracy, margin: dpo.meanMargin });
        usage = dpo.usage;
      } else {
        const measured = await parts.measureLoss({ ...phase, which: 'eval' });
        point.loss = measured.perToken;
        usage = measured.usage;
        if (input.samplesPath) {
          const key = roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), 'sampler-weights', `s${input.step}`);
          await parts.saveSamplerWeights({ spec: input.spec, sessionId: input.sessionId, key });
          const scored = await parts.sampleAndScore({ ...phase, label: `sample-s${input.step}`, outputPath: input.samplesPath });
          point.metric = scored.accuracy;
          usage = addUsage(usage, scored.usage);
        }
      }
      await writeJsonAtomic(stepsFolder.evaluation(input.stepsDir, input.step, input.lineage, joinLocation), point);
      const tracking: RoundTracking = { campaignId: input.campaignId, round: input.round, spec: input.spec };
      await trackEvaluation(tracking, point);
      return { ...point, ...(usage ? { usage } : {}) };
    },
  };
}

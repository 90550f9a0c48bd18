import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/spec';
import type { RoundInput } from '../../workflows/round-contract';
import { writeTicketData } from '../../examples/support-tickets/generate';

/** A round input for the support-ticket example at a given size, against an emulator URL. */
export function ticketRoundInput(options: {
  baseUrl: string;
  campaignId: string;
  trainRows?: number;
  evalRows?: number;
  overrides?: string;
  heartbeatTimeoutSeconds?: number;
}): RoundInput {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-round-'));
  writeTicketData(dir, options.trainRows ?? 48, options.evalRows ?? 10);
  const yaml = `
name: tickets-test
provider: { kind: local, baseUrl: "${options.baseUrl}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 256, segmentSteps: 4, segmentSeconds: 60 }
sampling: { maxTokens: 4, temperature: 0 }
evaluation: { scorer: exact }
advanced: { heartbeatTimeoutSeconds: ${options.heartbeatTimeoutSeconds ?? 5} }
${options.overrides ?? ''}`;
  const file = path.join(dir, 'campaign.yaml');
  fs.writeFileSync(file, yaml);
  const spec = parseCampaignSpec(yaml, file);
  return {
    campaignId: options.campaignId,
    round: 1,
    spec: { name: spec.name, provider: spec.provider, training: spec.training, sampling: spec.sampling, evaluation: spec.evaluation, advanced: spec.advanced },
    data: { train: spec.data.train, eval: spec.data.eval },
    reportDir: path.join(dir, 'report'),
  };
}

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec, type CampaignSpec } from '../../config/io/spec';
import { writeTicketData } from '../../examples/support-tickets/generate';
import { writeArithmeticData } from '../../examples/arithmetic/generate';

/** A campaign spec over generated ticket data, against an emulator URL. */
export function ticketCampaignSpec(options: {
  baseUrl: string;
  trainRows?: number;
  evalRows?: number;
  yaml?: string;
  /** The `evaluation:` section (default: the exact scorer). */
  evaluation?: string;
}): {
  spec: CampaignSpec;
  dir: string;
} {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-campaign-'));
  writeTicketData(dir, options.trainRows ?? 60, options.evalRows ?? 15);
  const text = `
name: tickets-campaign
provider: { kind: local, baseUrl: "${options.baseUrl}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 2, batchSize: 10, learningRate: 0.005, loraRank: 8, maxSeqLen: 256, segmentSteps: 4 }
sampling: { maxTokens: 4, temperature: 0 }
evaluation: ${options.evaluation ?? '{ scorer: exact }'}
advanced: { heartbeatTimeoutSeconds: 5 }
${options.yaml ?? 'rounds: { max: 3 }'}
`;
  const file = path.join(dir, 'campaign.yaml');
  fs.writeFileSync(file, text);
  return { spec: parseCampaignSpec(text, file), dir };
}

/**
 * A staged campaign spec over fresh arithmetic sums (`stages`: the YAML list under `stages:`), against an emulator
 * URL. The campaign's blocks are one small SFT epoch: a stage that sets none is that.
 */
export function arithmeticStagesSpec(options: { baseUrl: string; stages: string; limit?: number }): { spec: CampaignSpec; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-stages-d-'));
  writeArithmeticData(dir, { limit: options.limit });
  const text = `
name: staged
provider: { kind: local, baseUrl: "${options.baseUrl}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 5 }
sampling: { maxTokens: 3, temperature: 0 }
evaluation: { scorer: numeric }
advanced: { heartbeatTimeoutSeconds: 5 }
stages:
${options.stages}`;
  const file = path.join(dir, 'campaign.yaml');
  fs.writeFileSync(file, text);
  return { spec: parseCampaignSpec(text, file), dir };
}

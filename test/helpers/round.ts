import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/spec';
import type { RoundInput } from '../../workflows/round-contract';
import { writeTicketData, writeTicketPreferences } from '../../examples/support-tickets/generate';
import { writeArithmeticData } from '../../examples/arithmetic/generate';

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

/** A round input on the arithmetic example (prompt/answer rows, or preference pairs for `pairs: true`; support-ticket pairs for `tickets: true`). */
export function arithmeticRoundInput(options: { baseUrl: string; campaignId: string; yaml: string; pairs?: boolean; dir?: string; round?: number; limit?: number; tickets?: boolean }): RoundInput {
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'rh-arith-'));
  if (!fs.existsSync(path.join(dir, 'train.jsonl'))) writeArithmeticData(dir, { limit: options.limit });
  if (options.tickets && !fs.existsSync(path.join(dir, 'tickets'))) writeTicketPreferences(path.join(dir, 'tickets'), 64, 20);
  const yaml = `
name: arithmetic-test
provider: { kind: local, baseUrl: "${options.baseUrl}", model: roundhouse/tiny-chat }
data: ${options.tickets ? '{ train: tickets/pairs.train.jsonl, eval: tickets/pairs.eval.jsonl }' : options.pairs ? '{ train: pairs.train.jsonl, eval: pairs.eval.jsonl }' : '{ train: train.jsonl, eval: eval.jsonl }'}
evaluation: { scorer: numeric }
${options.yaml}`;
  const file = path.join(dir, `campaign-${options.campaignId.replace(/[^A-Za-z0-9]/g, '-')}.yaml`);
  fs.writeFileSync(file, yaml);
  const spec = parseCampaignSpec(yaml, file);
  return {
    campaignId: options.campaignId,
    round: options.round ?? 1,
    spec: { name: spec.name, provider: spec.provider, training: spec.training, sampling: spec.sampling, evaluation: spec.evaluation, advanced: spec.advanced, round: spec.round },
    data: { train: spec.data.train, eval: spec.data.eval },
    reportDir: path.join(dir, `report-${options.campaignId.replace(/[^A-Za-z0-9]/g, '-')}`),
  };
}

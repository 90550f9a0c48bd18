import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { EmulatorOptions } from '../../emulator/server';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import type { WorkflowHandle } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { roundProgressQuery, roundSpecOf, type RoundInput, type RoundProgress, type RoundResult } from '../../workflows/round/contract';
import { startTestEmulator, type RunningEmulator } from './emulator';
import { bundleWorkflows, connectTestTemporal, type TestTemporal } from './temporal';
import { writeTicketData, writeTicketPreferences } from '../../examples/support-tickets/generate';
import { writeArithmeticData } from '../../examples/arithmetic/generate';
import { roundWorkflow } from '../../workflows';
import { testReportDir } from './artifacts';

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
    spec: roundSpecOf(spec),
    data: { train: spec.data.train, eval: spec.data.eval },
    reportDir: testReportDir(path.join(dir, 'report')),
  };
}

/** A round input on the arithmetic example (prompt/answer rows, or preference pairs for `pairs: true`; support-ticket pairs for `tickets: true`). */
export function arithmeticRoundInput(options: {
  baseUrl: string;
  campaignId: string;
  yaml: string;
  pairs?: boolean;
  dir?: string;
  round?: number;
  limit?: number;
  tickets?: boolean;
  /** The `evaluation:` section (default: the numeric scorer). */
  evaluation?: string;
}): RoundInput {
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'rh-arith-'));
  if (!fs.existsSync(path.join(dir, 'train.jsonl'))) writeArithmeticData(dir, { limit: options.limit });
  if (options.tickets && !fs.existsSync(path.join(dir, 'tickets'))) writeTicketPreferences(path.join(dir, 'tickets'), 64, 20);
  const yaml = `
name: arithmetic-test
provider: { kind: local, baseUrl: "${options.baseUrl}", model: roundhouse/tiny-chat }
data: ${options.tickets ? '{ train: tickets/pairs.train.jsonl, eval: tickets/pairs.eval.jsonl }' : options.pairs ? '{ train: pairs.train.jsonl, eval: pairs.eval.jsonl }' : '{ train: train.jsonl, eval: eval.jsonl }'}
evaluation: ${options.evaluation ?? '{ scorer: numeric }'}
${options.yaml}`;
  const file = path.join(dir, `campaign-${options.campaignId.replace(/[^A-Za-z0-9]/g, '-')}.yaml`);
  fs.writeFileSync(file, yaml);
  const spec = parseCampaignSpec(yaml, file);
  return {
    campaignId: options.campaignId,
    round: options.round ?? 1,
    spec: roundSpecOf(spec),
    data: { train: spec.data.train, eval: spec.data.eval },
    reportDir: testReportDir(path.join(dir, `report-${options.campaignId.replace(/[^A-Za-z0-9]/g, '-')}`)),
  };
}

/**
 * A jest file's environment for running rounds in-process: the shared dev server, one workflow bundle, an emulator,
 * and a provider registry; `runRound` runs one round on a fresh worker and returns its result.
 */
export function roundTestEnvironment(emulatorOptions: EmulatorOptions = {}, providerEnv: NodeJS.ProcessEnv = process.env) {
  const env = {} as { temporal: TestTemporal; bundle: WorkflowBundleWithSourceMap; emulator: RunningEmulator; providers: ProviderRegistry };
  beforeAll(async () => {
    env.temporal = await connectTestTemporal();
    env.bundle = await bundleWorkflows();
    env.emulator = await startTestEmulator(emulatorOptions);
    env.providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-providers-')), env: providerEnv });
  });
  afterAll(async () => {
    await env.providers?.close();
    await env.emulator?.close();
    await env.temporal?.close();
  });
  /** Runs `body` while a fresh in-process worker serves the task queue (with the deployment's data converter, if any). */
  const withWorker = async <T>(taskQueue: string, body: () => Promise<T>, options: { dataConverter?: DataConverter } = {}): Promise<T> => {
    const worker = await createRoundhouseWorker({
      connection: env.temporal.nativeConnection,
      namespace: env.temporal.settings.namespace,
      taskQueue,
      workflowBundle: env.bundle,
      providers: env.providers,
      ...options,
    });
    return worker.runUntil(body());
  };
  const runRound = (input: RoundInput, taskQueue: string): Promise<RoundResult> =>
    withWorker(taskQueue, () =>
      env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
    );
  return { env, runRound, withWorker };
}

/** A round's progress, or undefined while no worker can answer the query (e.g. between a kill and a restart). */
export async function progressOf(handle: WorkflowHandle): Promise<RoundProgress | undefined> {
  try {
    return await handle.query(roundProgressQuery);
  } catch {
    return undefined;
  }
}

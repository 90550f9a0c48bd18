import { parseCampaignSpec } from '../../config/io/spec';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import { readArtifact } from '../helpers/artifacts';
import { raw } from '../helpers/emulator';
import { ticketRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// W&B through the provider's own integration: Together's training sessions carry metadata.wandb (labels tying the
// session to a W&B run, no key). The emulator stores and echoes what it received.
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 });

test('the spec’s W&B settings reach the Together session as metadata.wandb; no W&B key goes anywhere', async () => {
  const marker = 'wandb-secret-key-that-must-not-leak-0123456789';
  process.env.WANDB_API_KEY = marker; // a worker that has one: it is never read or sent
  try {
    const taskQueue = uniqueTaskQueue('wandb');
    const input = ticketRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `wandb-${taskQueue}`,
      trainRows: 16,
      evalRows: 4,
      overrides: 'tracking: { wandb: { project: support-tickets, entity: ml-team } }',
    });
    const result = await runRound(input, taskQueue);
    expect(result.status).toBe('completed');
    const report = await readArtifact<{ session_id: string; workflow_id: string }>(result.reportPath);
    const session = await raw(env.emulator, 'GET', `/v1/rl/training-sessions/${report.session_id}`, { apiKey: LOCAL_EMULATOR_KEY });
    expect(session.status).toBe(200);
    expect(session.json.metadata).toEqual({
      wandb: { project: 'support-tickets', entity: 'ml-team', group: input.campaignId, run_name: report.workflow_id },
    });
    const history = JSON.stringify(await env.temporal.client.workflow.getHandle(report.workflow_id).fetchHistory());
    expect(history).not.toContain(marker);
    expect(JSON.stringify(report)).not.toContain(marker);
    expect(JSON.stringify(session.json)).not.toContain(marker);
  } finally {
    delete process.env.WANDB_API_KEY;
  }
});

test('W&B settings on Baseten are refused before anything starts, naming the field: its API takes none', () => {
  const yaml = `name: x
provider: { kind: baseten, model: Qwen/Qwen3.5-2B }
data: { train: t.jsonl, eval: e.jsonl }
training: { epochs: 1, batchSize: 2, learningRate: 0.001, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 4 }
tracking: { wandb: { project: p } }
`;
  expect(() => parseCampaignSpec(yaml, 'campaign.yaml')).toThrow(/^campaign\.yaml:6 tracking\.wandb: is not available on Baseten Loops/);
});

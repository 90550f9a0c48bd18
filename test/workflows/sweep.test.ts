import path from 'node:path';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import type { RoundInput } from '../../workflows/round/contract';
import { campaignWorkflow } from '../../workflows';
import { renderProgress } from '../../cli/progress';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger } from '../helpers/emulator';
import { roundTestEnvironment } from '../helpers/round';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { RoundReportSchema } from '../../config/io/round-report';
import { uniqueTaskQueue } from '../helpers/temporal';

// `sweep` (workflows/sweep/): the campaign's first round as arms, successive halving at each rung by the eval metric,
// and the winner continuing as the campaign. Each arm is a round of its own: exact steps per arm on the ledger.
const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, TINKER_API_KEY: 'tml-sweep-key' });

const SWEEP = `sweep:
  over: { training.learningRate: [0.0005, 0.002, 0.008, 0.03] }
  select: { metric: eval_loss, rungs: 2, eta: 2 }`;

async function runSweep(label: string, tinker = false): Promise<{ result: CampaignResult; campaignId: string }> {
  const taskQueue = uniqueTaskQueue(`sweep-${label}`);
  // 30 rows, batches of 10, 2 epochs: 6 steps; rungs at steps 2 and 4 (4 arms → 2 → 1).
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 30,
    evalRows: 10,
    yaml: `rounds: { max: 2, nextData: { policy: static } }\n${SWEEP}`,
  });
  if (tinker) spec.provider = { ...spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  const campaignId = `sweep-${label}-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  return { result, campaignId };
}

test.each([
  ['together', false],
  ['tinker', true],
] as const)(
  '%s: a 4-arm sweep halves at each rung by eval loss, the winner continues into round 2; every arm exact, nothing left active',
  async (label, tinker) => {
    const { result, campaignId } = await runSweep(label, tinker);
    expect(result.status).toBe('completed');
    expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
    const sweep = result.rounds[0]!.sweep!;
    expect(sweep.arms.map((a) => a.arm)).toEqual([1, 2, 3, 4]);
    // Rung 1 (step 2): 4 arms measured, the best 2 kept; rung 2 (step 4): 2 measured, the best one kept.
    expect(sweep.decisions.map((d) => [d.rung, d.step, d.figures.length, d.kept.length])).toEqual([
      [1, 2, 4, 2],
      [2, 4, 2, 1],
    ]);
    for (const d of sweep.decisions) {
      const worstKept = Math.max(...d.kept.map((a) => d.figures.find((f) => f.arm === a)!.value));
      const bestStopped = Math.min(...d.stopped.map((a) => d.figures.find((f) => f.arm === a)!.value));
      expect(worstKept).toBeLessThanOrEqual(bestStopped); // kept by eval loss, lower is better
    }
    const winner = sweep.winner!;
    expect(winner.arm).toBe(sweep.decisions[1]!.kept[0]);
    const byArm = new Map(sweep.arms.map((a) => [a.arm, a]));
    expect(byArm.get(winner.arm)).toMatchObject({ status: 'completed', step: 6 });
    for (const a of sweep.arms.filter((x) => x.arm !== winner.arm)) {
      expect(a.status).toBe('stopped');
      expect(a.step).toBe(2 * a.stoppedAtRung!); // stopped right at its rung
    }
    // Each arm trained on its own session: the ledger's optimizer steps per arm are exactly what the arm reports.
    const l = await ledger(env.emulator);
    // (An arm's sessions: those on what its report says it released, a Together resource or a Tinker session.)
    const armSteps = await Promise.all(
      sweep.arms.map(async (a) => {
        const report = RoundReportSchema.parse(await readArtifact(a.reportPath!));
        // A packed arm released its sessions (the trainer is the sweep's); an unpacked one its trainer.
        const ours = (id: string) => report.deactivated_ids.some((d) => id === d || id.startsWith(`${d}:`));
        return l.sessions
          .filter((s) => (ours(s.resourceId) || ours(s.id)) && !s.displayName?.includes('reference'))
          .reduce((n, s) => n + s.optimizerSteps, 0);
      }),
    );
    expect(armSteps).toEqual(sweep.arms.map((a) => a.step));
    expect(l.active.filter((id) => l.resources.find((r) => r.id === id)?.ownerTag?.includes(campaignId))).toEqual([]);
    if (!tinker) {
      // Packed: the four arms' sessions side by side on one trainer of the sweep's (the model takes 5), billed once.
      expect(sweep.trainers).toHaveLength(1);
      expect(sweep.trainers![0]!.arms).toEqual([1, 2, 3, 4]);
      const shared = l.resources.find((r) => r.id === sweep.trainers![0]!.resourceId)!;
      expect(l.sessions.filter((s) => s.resourceId === shared.id && !s.displayName?.includes('reference'))).toHaveLength(4);
      expect(shared.status).not.toBe('READY'); // released by the sweep once its last arm ended
      // No arm made a trainer of its own: the campaign's resources are the shared one and round 2's.
      const owned = l.resources.filter((r) => l.sessions.some((s) => s.resourceId === r.id && s.displayName?.includes(campaignId)));
      expect(owned).toHaveLength(2);
    } else expect(sweep.trainers).toBeUndefined(); // Tinker publishes no session limit: an arm, a session of its own
    // Round 2 goes on from the winner's checkpoint, with the winner's learning rate.
    const round2 = await env.temporal.client.workflow.getHandle(`${campaignId}-round-2`).fetchHistory();
    const started = round2.events![0]!.workflowExecutionStartedEventAttributes!;
    const payload = started.input!.payloads![0]!;
    const round2Input = JSON.parse(Buffer.from(payload.data as Uint8Array).toString()) as RoundInput;
    expect(round2Input.spec.training.learningRate).toBe(winner.assign['training.learningRate']);
    expect(round2Input.startFrom?.checkpointId).toBe(result.rounds[0]!.trainingCheckpointId);
    expect(renderProgress(result)).toMatch(/sweep: 4 arms/);
    process.stderr.write(
      `[sweep ${label}] winner arm ${winner.arm} (${JSON.stringify(winner.assign)}) eval loss ${winner.value?.toFixed(4)}; decisions ${JSON.stringify(sweep.decisions.map((d) => ({ rung: d.rung, kept: d.kept })))}\n`,
    );
  },
  240_000,
);

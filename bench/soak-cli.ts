import { loadWorkerSettings } from '../config/io/worker-env';
import { connectClient, startTemporal, temporalClient } from '../workers/temporal-server';
import { ensureDist } from '../test/helpers/dist';
import { runSoak } from './soak';

/**
 * `npm run soak [-- --rounds N --seed S]`: N randomized rounds (default 100) under worker SIGKILLs, transport faults and
 * provider faults; prints one `name: value` line per figure and exits non-zero unless every round kept exact steps,
 * with no empty optimizer step in its kept weights and nothing left active.
 */
async function main(argv: string[]): Promise<number> {
  const arg = (name: string, fallback: number) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? Number(argv[i + 1]) : fallback;
  };
  const rounds = arg('rounds', 100);
  const seed = arg('seed', 1);
  ensureDist(); // the workers run dist/: without a build they would soak whatever code it last held
  const settings = loadWorkerSettings();
  const server = await startTemporal(settings);
  const connection = await connectClient(settings, server.address);
  try {
    const started = Date.now();
    const f = await runSoak({
      client: temporalClient({ ...settings, address: server.address }, connection),
      temporalAddress: server.address,
      rounds,
      seed,
      log: (line) => process.stderr.write(`[soak] ${line}\n`),
    });
    const lines = [
      `soak.rounds: ${f.rounds}`,
      `soak.rounds_completed: ${f.completed}`,
      `soak.steps_exact: ${f.stepsExact}`,
      `soak.steps_recorded_once: ${f.recordedOnce}`,
      `soak.empty_optimizer_steps_in_kept_weights: ${f.emptyStepsInKeptWeights}`,
      `soak.resources_left_active: ${f.resourcesLeftActive}`,
      `soak.recoveries: ${f.recoveries}`,
      `soak.capacity_waits: ${f.capacityWaits} (${f.capacityRetries} creates given up for capacity and made again)`,
      `soak.worker_kills: ${f.workerKills} (${f.killsInTraining} inside a training segment; ${f.killsMissed.length} rounds drawn for a kill got none there)`,
      `soak.faults_injected: ${f.faultsInjected}`,
      `soak.minutes: ${((Date.now() - started) / 60_000).toFixed(1)}`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    for (const failure of f.failures) process.stderr.write(`[soak] ${failure}\n`);
    const ok =
      f.completed === rounds &&
      f.stepsExact === rounds &&
      f.recordedOnce === rounds &&
      f.emptyStepsInKeptWeights === 0 &&
      f.resourcesLeftActive === 0 &&
      f.killsInTraining === f.workerKills &&
      f.killsMissed.every((m) => m.includes('training ended before'));
    return ok ? 0 : 1;
  } finally {
    await connection.close();
    await server.stop();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);

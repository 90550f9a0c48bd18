import { Command, InvalidArgumentError } from 'commander';
import { modules } from './modules';

function integer(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

function rate(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('a rate is a number from 0 to 1');
  return n;
}

interface EmulatorFlags {
  port: number;
  host: string;
  provisioningDelayMs: number;
  operationLatencyMs: number;
  clockCycleMs: number;
  stateDir?: string;
  zeroCompute?: boolean;
  faultSeed: number;
  latencyMs: number;
  rate429: number;
  rate5xx: number;
  resetRate: number;
  loseResponseRate: number;
  faultMax: number;
}

export function emulatorCommand(): Command {
  return new Command('emulator')
    .description('Run the local provider emulator (Together and Baseten wire dialects, a small real learner, a ledger)')
    .option('--port <n>', 'port to listen on; 0 picks a free one', integer('--port', 0, 65535), 0)
    .option('--host <host>', 'loopback address to bind', '127.0.0.1')
    .option(
      '--provisioning-delay-ms <ms>',
      'PENDING → READY time of a new resource',
      integer('--provisioning-delay-ms', 0, 3_600_000),
      1000,
    )
    .option('--operation-latency-ms <ms>', 'simulated compute time of each operation', integer('--operation-latency-ms', 0, 600_000), 0)
    .option('--clock-cycle-ms <ms>', 'run operations only on ticks of this period (0 = off)', integer('--clock-cycle-ms', 0, 600_000), 0)
    .option('--state-dir <dir>', 'persist resources, sessions and checkpoints here')
    .option(
      '--zero-compute',
      'answer every operation at once with deterministic figures instead of running the learner (for measuring orchestration)',
    )
    .option('--fault-seed <n>', 'seed of the fault PRNG', integer('--fault-seed', 0, 2 ** 31 - 1), 1)
    .option('--latency-ms <ms>', 'added latency on every request', integer('--latency-ms', 0, 60_000), 0)
    .option('--rate-429 <p>', 'share of requests answered 429', rate, 0)
    .option('--rate-5xx <p>', 'share of requests answered 503', rate, 0)
    .option('--reset-rate <p>', 'share of connections reset before handling', rate, 0)
    .option('--lose-response-rate <p>', 'share of requests applied but never answered', rate, 0)
    .option('--fault-max <n>', 'at most this many faults of each kind', integer('--fault-max', 0, 100_000), 100)
    .addHelpText(
      'after',
      () =>
        `\nFault kinds (also settable at POST /_emulator/faults): ${modules.emulatorProcess().FAULT_KINDS.join(', ')}\n\nExample:\n  roundhouse emulator --port 8800 --provisioning-delay-ms 2000 --rate-429 0.05\n  curl http://127.0.0.1:8800/_emulator/ledger`,
    )
    .action(async (flags: EmulatorFlags) => {
      const rules = [
        { kind: 'http-429', rate: flags.rate429 },
        { kind: 'http-503', rate: flags.rate5xx },
        { kind: 'reset', rate: flags.resetRate },
        { kind: 'lose-response', rate: flags.loseResponseRate },
      ]
        .filter((r) => r.rate > 0)
        .map((r) => ({ ...r, max: flags.faultMax }));
      await modules.emulatorProcess().serveEmulatorUntilSignal({
        port: flags.port,
        host: flags.host,
        provisioningDelayMs: flags.provisioningDelayMs,
        operationLatencyMs: flags.operationLatencyMs,
        clockCycleMs: flags.clockCycleMs,
        stateDir: flags.stateDir,
        compute: flags.zeroCompute ? 'none' : 'learner',
        faults: { seed: flags.faultSeed, latencyMs: flags.latencyMs, rules },
      });
    });
}

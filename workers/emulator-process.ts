import { FAULT_KINDS } from '../emulator/faults';
import { startEmulator, type EmulatorOptions } from '../emulator/server';

export { FAULT_KINDS };

/**
 * `roundhouse emulator`: the emulator as a process of its own. Prints the URL it listens on, serves until SIGINT or
 * SIGTERM, then closes (saving its state when it has a state dir) and resolves, so the process exits 0.
 */
export async function serveEmulatorUntilSignal(options: EmulatorOptions): Promise<void> {
  const emulator = await startEmulator(options);
  process.stdout.write(`roundhouse emulator listening on ${emulator.url}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await emulator.close();
}

import fs from 'node:fs';
import path from 'node:path';
import type { Engine, EngineSnapshot } from './engine';

/**
 * Keeps the engine's state in `<dir>/emulator-state.json`, written atomically (temporary file + rename) at most
 * once a second while things change, and on close. A restarted emulator on the same folder keeps its
 * resources, sessions (with their learners) and checkpoints.
 */
export class EmulatorStore {
  private readonly file: string;
  private timer: NodeJS.Timeout | undefined;
  private dirty = false;
  private saving: Promise<void> = Promise.resolve();

  constructor(
    dir: string,
    private readonly engine: Engine,
    private readonly intervalMs = 1000,
  ) {
    fs.mkdirSync(dir, { recursive: true });
    this.file = path.join(dir, 'emulator-state.json');
    engine.onChange(() => this.schedule());
  }

  async load(): Promise<void> {
    if (!fs.existsSync(this.file)) return;
    const snapshot = JSON.parse(fs.readFileSync(this.file, 'utf8')) as EngineSnapshot;
    if (snapshot.version !== 1) throw new Error(`${this.file}: unsupported emulator state version ${String(snapshot.version)}`);
    await this.engine.restore(snapshot);
  }

  private schedule(): void {
    this.dirty = true;
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.save();
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Writes the state if it changed. Saves run one at a time: overlapping ones would share the temporary file. */
  save(): Promise<void> {
    this.saving = this.saving.catch(() => undefined).then(() => this.write());
    return this.saving;
  }

  private async write(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (!this.dirty) return;
    this.dirty = false;
    const partial = `${this.file}.${process.pid}.partial`;
    await fs.promises.writeFile(partial, JSON.stringify(this.engine.snapshot()));
    await fs.promises.rename(partial, this.file);
  }
}

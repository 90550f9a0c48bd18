/** A step of the teardown; `keepFiles` asks it to leave its files behind (a failed run's evidence). */
export type TeardownStep = (keepFiles: boolean) => Promise<void>;

/**
 * What the run started, stopped in reverse order, once: at the end, or on SIGINT/SIGTERM. Each part adds its step
 * as soon as it has something to stop, before it waits on it.
 */
export class Teardown {
  private readonly steps: TeardownStep[] = [];
  private done?: Promise<void>;
  constructor(private readonly log: (line: string) => void) {}

  add(step: TeardownStep): void {
    this.steps.push(step);
  }

  run(keepFiles: boolean): Promise<void> {
    this.done ??= (async () => {
      for (const step of this.steps.reverse())
        await step(keepFiles).catch((err: unknown) => this.log(`teardown: ${(err as Error).message}`));
    })();
    return this.done;
  }
}

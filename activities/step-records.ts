import { joinLocation, storeFor } from '../config/io/artifacts';
import { keptByLineage, type Rollback } from '../config/rules/lineage';
import { readJson, writeJsonAtomic } from './files';
import { stepsFolder } from '../config/rules/round-files';

/**
 * A round's step records: what each confirmed optimizer step did (its loss, and what its kind adds), written by the
 * training segments in the round's steps directory and read back by the report and the experiment tracker.
 */

/** What every kind's step record holds: its round step (1-based, after the step) and its loss over `tokens`. */
export interface StepRecord {
  step: number;
  /** The step's loss as the provider reported it (a sum or a mean by dialect and loss type: config/rules/loss-units.ts). */
  loss: number;
  /** Trained tokens (weight ≠ 0); DPO: 1. */
  tokens: number;
  /** The loss per trained token (`lossPerToken` of config/rules/loss-units.ts); absent in records written before it. */
  lossPerToken?: number;
  /** The lineage that trained it, after a rollback (absent for the first). */
  lineage?: number;
  /** When it was confirmed (epoch ms): the time the tracker logs it with, the same on every retry. */
  at?: number;
}

/** A record's loss per trained token; a record written before `lossPerToken` had its loss read as a sum. */
export function lossPerTokenOf(r: StepRecord): number {
  return r.lossPerToken ?? r.loss / Math.max(1, r.tokens);
}

/** How often a running segment writes its confirmed steps' records and hands them to the tracker (default a minute). */
function recordFlushMs(): number {
  return Number(process.env.ROUNDHOUSE_RECORD_FLUSH_MS ?? 60_000);
}

/**
 * Step records of a round: one JSON file per segment write (`steps-<first step>.json`), read back as one list. A
 * step is recorded when any file holds it; the report keeps one record per step.
 */
export class StepRecords<R extends StepRecord> {
  private readonly recorded = new Set<number>();
  private readonly pending: R[] = [];
  private readonly all: R[] = [];
  private flushedAtMs = Date.now();

  private constructor(
    private readonly dir: string,
    private readonly lineage: number,
  ) {}

  static async load<R extends StepRecord>(dir: string, lineage: number): Promise<StepRecords<R>> {
    const records = new StepRecords<R>(dir, lineage);
    for (const r of await readStepRecords(dir)) if ((r.lineage ?? 0) === lineage) records.recorded.add(r.step);
    return records;
  }

  /** Round steps (0-based, as submitted) in [from, to) that no record holds. */
  missing(from: number, to: number): number[] {
    const out: number[] = [];
    for (let step = from; step < to; step++) if (!this.recorded.has(step + 1)) out.push(step);
    return out;
  }

  add(record: R): R {
    if (this.lineage > 0) record.lineage = this.lineage;
    record.at ??= Date.now();
    this.recorded.add(record.step);
    this.pending.push(record);
    this.all.push(record);
    return record;
  }

  since(cursorStep: number): R[] {
    return this.all.filter((r) => r.step > cursorStep).sort((a, b) => a.step - b.step);
  }

  /** A segment running longer than recordFlushMs() writes what it has (a file a minute, never one per step). */
  due(): boolean {
    return this.pending.length > 0 && Date.now() - this.flushedAtMs >= recordFlushMs();
  }

  /** One write per segment, or per minute of a long one: the store is off the per-step path. Returns what it wrote. */
  async flush(): Promise<R[]> {
    this.flushedAtMs = Date.now();
    if (this.pending.length === 0) return [];
    const first = Math.min(...this.pending.map((r) => r.step));
    await writeJsonAtomic(
      stepsFolder.records(this.dir, first, this.lineage, joinLocation),
      this.pending.sort((a, b) => a.step - b.step),
    );
    return this.pending.splice(0);
  }
}

/** Every step record of a round that the kept weights hold, one per step, in step order (config/rules/lineage.ts). */
export async function readStepRecords<R extends StepRecord = StepRecord>(dir: string, rollbacks: Rollback[] = []): Promise<R[]> {
  const files = (await storeFor(dir).list(dir)).filter(stepsFolder.isRecords);
  const records: R[] = [];
  for (const f of files) records.push(...((await readJson<R[]>(f)) ?? []));
  return keptByLineage(records, rollbacks);
}

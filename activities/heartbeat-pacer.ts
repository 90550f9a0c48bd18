import { Context } from '@temporalio/activity';

/**
 * Heartbeats per second that the long-running activities of one worker process (training segments, provisioning)
 * send together, at most. Each heartbeat is a server request (a billed action on Temporal Cloud), and they share a
 * worker: one activity alone may send one every 10 ms, 100 running one a second each, 1,000 one every 10 s each, so
 * the server's heartbeat load per worker stays flat however many rounds it holds. Never wider than a third of the
 * heartbeat timeout, so no activity is timed out for it. The SDK's throttle (maxHeartbeatThrottleInterval) applies on
 * top.
 */
export const HEARTBEATS_PER_SECOND = 100;

/** Activities pacing heartbeats in this process now. */
let running = 0;

/**
 * One activity's heartbeats, within the worker's budget. `report` hands over the latest details: they go out at once
 * when the gap since the last heartbeat allows, else at the next turn of a one-second timer. `sendNow` is for the
 * moments that matter (an id the next attempt needs), `flush` for the last word; both ignore the budget. The timer
 * also resends the latest when nothing went out for `keepaliveMs` (by default a third of the heartbeat timeout), so
 * an operation that takes longer than the timeout never times the activity out. `stop` ends it (in a `finally`).
 */
export class HeartbeatPacer<D> {
  private readonly context = Context.current();
  private readonly timeoutMs = this.context.info.heartbeatTimeoutMs ?? 30_000;
  private readonly keepaliveMs: (gapMs: number) => number;
  private latest: D | undefined;
  private unsent = false;
  private sentAtMs = 0;
  private stopped = false;
  private readonly timer: NodeJS.Timeout;

  constructor(options: { keepaliveMs?: (gapMs: number) => number } = {}) {
    this.keepaliveMs = options.keepaliveMs ?? (() => this.timeoutMs / 3);
    running += 1;
    this.timer = setInterval(() => this.tick(), 1000);
    this.timer.unref();
  }

  report(details: D): void {
    this.latest = details;
    this.unsent = true;
    if (Date.now() - this.sentAtMs >= this.gapMs()) this.send();
  }

  sendNow(details: D): void {
    this.latest = details;
    this.send();
  }

  /** The last word (the cursor a segment returns with), whatever the budget. */
  flush(): void {
    if (this.unsent) this.send();
  }

  stop(): void {
    clearInterval(this.timer);
    if (!this.stopped) running -= 1;
    this.stopped = true;
  }

  /** The least time between two heartbeats of one activity now. */
  private gapMs(): number {
    return Math.min(this.timeoutMs / 3, (running * 1000) / HEARTBEATS_PER_SECOND);
  }

  private tick(): void {
    const since = Date.now() - this.sentAtMs;
    const gap = this.gapMs();
    if ((this.unsent && since >= gap) || since >= this.keepaliveMs(gap)) this.send();
  }

  private send(): void {
    if (this.latest === undefined) return;
    this.context.heartbeat(this.latest);
    this.sentAtMs = Date.now();
    this.unsent = false;
  }
}

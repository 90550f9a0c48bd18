import type { NotifyEvent } from '../config/io/spec';

/** Where and how a campaign's notifications go (the spec's `notify`, without secrets: those are the worker's). */
export interface NotifyTarget {
  webhook?: string;
  webhookEnv?: string;
  format: 'json' | 'slack';
  secretEnv: string;
}

/** One notification: sent at least once, under its idempotency key. */
export interface NotificationInput {
  /** `<campaign>/<event>`: the receiver drops a key it has seen. */
  key: string;
  type: NotifyEvent;
  campaignId: string;
  atMs: number;
  /** One human sentence (the Slack body). */
  text: string;
  data: Record<string, unknown>;
  target: NotifyTarget;
}

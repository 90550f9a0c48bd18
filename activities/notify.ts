import { createHmac } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { request } from 'undici';
import type { NotificationInput } from '../workflows/notify-contract';

/** The HMAC header a receiver checks: `sha256=<hex of HMAC-SHA256(secret, body)>`. */
export const SIGNATURE_HEADER = 'x-roundhouse-signature';

export function signatureOf(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** The request body of a notification, in the target's format. */
export function notificationBody(input: NotificationInput): string {
  if (input.target.format === 'slack') return JSON.stringify({ text: input.text });
  const { key, type, campaignId, atMs, text, data } = input;
  return JSON.stringify({ id: key, type, campaignId, at: new Date(atMs).toISOString(), text, data });
}

export function createNotifyActivities() {
  return {
    /**
     * POSTs the notification once. 2xx: delivered. A network error, 408, 429 or 5xx: thrown, so Temporal retries it
     * (with backoff). Another 4xx, or a webhook variable the worker does not have: NotificationRefused, not retried.
     * The URL and the secret come from the worker's environment where the spec says so, and are never logged.
     */
    async deliverNotification(input: NotificationInput): Promise<{ status: number }> {
      const { target } = input;
      const url = target.webhook ?? (target.webhookEnv ? process.env[target.webhookEnv] : undefined);
      if (!url)
        throw ApplicationFailure.nonRetryable(`notify.webhookEnv: ${target.webhookEnv} is not set on this worker`, 'NotificationRefused');
      const body = notificationBody(input);
      const secret = process.env[target.secretEnv];
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'idempotency-key': input.key,
        'x-roundhouse-event': input.type,
        ...(secret ? { [SIGNATURE_HEADER]: signatureOf(secret, body) } : {}),
      };
      let status: number;
      let answer = '';
      try {
        const res = await request(url, { method: 'POST', body, headers, headersTimeout: 10_000, bodyTimeout: 10_000 });
        status = res.statusCode;
        answer = (await res.body.text()).slice(0, 200);
      } catch (err) {
        // Not the URL (it may be a secret): the kind of failure only.
        throw ApplicationFailure.retryable(
          `the webhook could not be reached: ${(err as NodeJS.ErrnoException).code ?? (err as Error).name}`,
          'NotificationFailed',
        );
      }
      if (status >= 200 && status < 300) return { status };
      const message = `the webhook answered HTTP ${status}${answer ? `: ${answer.replace(/\s+/g, ' ')}` : ''}`;
      if (status === 408 || status === 429 || status >= 500) throw ApplicationFailure.retryable(message, 'NotificationFailed');
      throw ApplicationFailure.nonRetryable(message, 'NotificationRefused');
    },
  };
}

export type NotifyActivities = ReturnType<typeof createNotifyActivities>;

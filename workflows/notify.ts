import { proxyActivities } from '@temporalio/workflow';
import type { NotifyActivities } from '../activities/notify';
import type { NotificationInput } from './notify-contract';

const { deliverNotification } = proxyActivities<NotifyActivities>({
  // One attempt is one POST (10 s bounds on its connect, headers and body): a worker that dies mid-send is retried soon.
  startToCloseTimeout: '30 seconds',
  // At least once: 2 s, 4 s, … 5 min apart, for about 45 minutes; an endpoint that refuses the request (4xx) is not retried.
  retry: {
    initialInterval: '2 seconds',
    backoffCoefficient: 2,
    maximumInterval: '5 minutes',
    maximumAttempts: 16,
    nonRetryableErrorTypes: ['NotificationRefused'],
  },
});

/**
 * A notification, as a workflow of its own (started by the campaign with ParentClosePolicy ABANDON, under the id
 * `notify:<key>`): its retries outlive the campaign, and a dead endpoint neither holds nor fails it.
 */
export async function notifyWorkflow(input: NotificationInput): Promise<void> {
  await deliverNotification(input);
}

// Every activity the worker registers. Activities that call providers get them from the worker's registry.
import { createCampaignActivities } from './campaign';
import { createDpoActivities } from './dpo-round';
import { createGrpoActivities } from './grpo';
import { createReaperActivities } from './reaper';
import { createRoundActivities, type ActivityDeps } from './round';
import { describeWorker } from './worker-info';

export { describeWorker } from './worker-info';
export type { ActivityDeps } from './round';

export function createActivities(deps: ActivityDeps) {
  return {
    describeWorker,
    ...createRoundActivities(deps),
    ...createGrpoActivities(deps),
    ...createDpoActivities(deps),
    ...createCampaignActivities(),
    ...createReaperActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;

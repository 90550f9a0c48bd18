// Every activity the worker registers. Activities that call providers get them from the worker's registry.
import { createCampaignActivities } from './campaign';
import type { ActivityDeps } from './deps';
import { createCustomActivities } from './custom';
import { createDpoActivities } from './dpo';
import { createEvaluationActivities } from './evaluation';
import { createGrpoActivities } from './grpo';
import { createNotifyActivities } from './notify';
import { createPromotionActivities } from './promotion';
import { createReaperActivities } from './reaper';
import { createRoundActivities } from './round';
import { createSftActivities } from './sft';
import { createTrainerActivities } from './trainer';
import { checkWorkerEnvironment, describeWorker } from './worker-info';

export { describeWorker } from './worker-info';
export type { ActivityDeps } from './deps';

export function createActivities(deps: ActivityDeps) {
  const round = createRoundActivities(deps);
  const dpo = createDpoActivities(deps);
  return {
    describeWorker,
    checkWorkerEnvironment,
    ...round,
    ...createTrainerActivities(deps),
    ...createSftActivities(deps),
    ...createGrpoActivities(deps),
    ...dpo,
    ...createCustomActivities(deps),
    ...createEvaluationActivities({ ...round, evaluateDpo: dpo.evaluateDpo }),
    ...createCampaignActivities(deps),
    ...createPromotionActivities(),
    ...createNotifyActivities(),
    ...createReaperActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;

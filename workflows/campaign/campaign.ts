import { ContinueAsNew, allHandlersFinished, condition, continueAsNew, patched, setHandler } from '@temporalio/workflow';
import {
  campaignProgressQuery,
  pauseCampaignUpdate,
  resumeCampaignUpdate,
  setCampaignLimitsUpdate,
  stopCampaignUpdate,
  validateCampaignLimits,
  validateStopRequest,
  type CampaignInput,
  type CampaignResult,
} from './contract';
import { approvePromotionUpdate, rejectPromotionUpdate, validateApproval } from './promotion-contract';
import { roundProgressSignal } from '../round/contract';
import { CampaignState } from './state';
import { failureReasonOf, isCancellation } from '../failures';
import { checkCampaignOrTell } from '../preflight';

/**
 * A campaign: rounds until the target metric, `rounds.max`, or a budget is reached. Each round is a child
 * workflow (cancelled if the campaign closes); round N+1 starts from round N's training checkpoint and trains on
 * data chosen by the next-data policy. The campaign continues-as-new after every round, carrying only summaries.
 * What it knows meanwhile, and what its messages do, is in state.ts; its stages in stages.ts, its promotion in promotion.ts.
 */
export async function campaignWorkflow(input: CampaignInput): Promise<CampaignResult> {
  const campaign = new CampaignState(input);
  const { promotion } = campaign;
  // Its messages (contract.ts, promotion-contract.ts), answered from its first workflow task on: progress (query); the
  // round's progress (signal, from the child); pause, resume, stop, limits, and a promotion's approve/reject (updates).
  setHandler(campaignProgressQuery, () => campaign.progress());
  setHandler(roundProgressSignal, (progress) => campaign.noteRoundProgress(progress));
  setHandler(pauseCampaignUpdate, () => campaign.pause());
  setHandler(resumeCampaignUpdate, () => campaign.resume());
  setHandler(stopCampaignUpdate, ({ mode }) => campaign.stop(mode), { validator: validateStopRequest });
  setHandler(setCampaignLimitsUpdate, (limits) => campaign.setLimits(limits), { validator: validateCampaignLimits });
  setHandler(approvePromotionUpdate, (request) => promotion.approve(request), {
    validator: (request) => validateApproval(request, promotion.approvalPending(), false),
  });
  setHandler(rejectPromotionUpdate, (request) => promotion.reject(request), {
    validator: (request) => validateApproval(request, promotion.approvalPending(), true),
  });

  // Every stage's Python calls and the worker's variables, before the first round provisions (a scheduled run too).
  if (!input.state && patched('campaign-checks-before-spend')) await checkCampaignOrTell(input.spec, campaign.notifier);
  try {
    return await runCampaign(campaign);
  } catch (err) {
    // The campaign's own failures (a data policy, a promotion, a summary write) are told too, then passed on.
    if (!(err instanceof ContinueAsNew) && !isCancellation(err) && patched('campaign-failed-notified'))
      await campaign.notifier.failed(failureReasonOf(err), campaign.progress());
    throw err;
  }
}

async function runCampaign(campaign: CampaignState): Promise<CampaignResult> {
  await campaign.unpaused();
  campaign.stopReason = campaign.reasonToStop();
  if (campaign.stopReason === undefined) {
    const result = await campaign.runRound();
    if (result?.status === 'completed' && campaign.reasonToStop() === undefined) await campaign.chooseNextData(result);
    await campaign.writeSummary({ ...campaign.progress(), status: 'running' });
    // Let update handlers finish so nothing sent to this run is lost, then start afresh with the summary only.
    await condition(allHandlersFinished);
    await continueAsNew<typeof campaignWorkflow>(campaign.continued());
  }
  let final = campaign.finish();
  if (campaign.promotion.promotes(final)) {
    // Champion and challenger (`promotion`): decided, approved where the rule asks, and recorded before the end.
    await campaign.promotion.promote(final);
    final = campaign.finish();
  }
  await campaign.writeSummary(final);
  await campaign.notifier.end(final);
  await condition(allHandlersFinished);
  return final;
}

import { joinLocation, storeFor } from '../config/io/artifacts';
import { ConfigError } from '../config/rules/errors';
import { writeCampaignReports } from '../activities/report';
import { campaignCheckpoints } from '../activities/checkpoints';
import { readJson } from '../config/io/artifacts';
import type { RetentionReport } from '../activities/retention';

/** `roundhouse report`: rewrites a campaign's report.html and summary.md from what its rounds left under `dir` (any store). */
export async function rewriteCampaignReport(
  id: string,
  dir: string,
  options: { temporalUiUrl: string; namespace: string },
): Promise<{ html: string; markdown: string }> {
  const summary = joinLocation(dir, 'campaign.json');
  if (!(await storeFor(summary).exists(summary))) throw new ConfigError(id, `no campaign report under ${dir}`);
  return writeCampaignReports(dir, options);
}

/** `roundhouse checkpoints`: every checkpoint a campaign's rounds saved, and the best, from its reports (any store). */
export async function listCampaignCheckpoints(
  id: string,
  dir: string,
): Promise<Awaited<ReturnType<typeof campaignCheckpoints>> & { retention?: RetentionReport }> {
  const summary = joinLocation(dir, 'campaign.json');
  if (!(await storeFor(summary).exists(summary))) throw new ConfigError(id, `no campaign report under ${dir}`);
  const retention = await readJson<RetentionReport>(joinLocation(dir, 'retention.json'));
  return { ...(await campaignCheckpoints(dir)), ...(retention ? { retention } : {}) };
}

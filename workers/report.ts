import { joinLocation, storeFor } from '../config/artifacts';
import { ConfigError } from '../config/errors';
import { writeCampaignReports } from '../activities/report';

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

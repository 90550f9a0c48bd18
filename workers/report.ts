import fs from 'node:fs';
import path from 'node:path';
import { ConfigError } from '../config/errors';
import { writeCampaignReports } from '../activities/report';

/** `roundhouse report`: rewrites a campaign's report.html and summary.md from the files its rounds left in `dir`. */
export function rewriteCampaignReport(
  id: string,
  dir: string,
  options: { temporalUiUrl: string; namespace: string },
): { html: string; markdown: string } {
  if (!fs.existsSync(path.join(dir, 'campaign.json'))) throw new ConfigError(id, `no campaign report under ${dir}`);
  return writeCampaignReports(dir, options);
}

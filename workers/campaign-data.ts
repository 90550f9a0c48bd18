import fs from 'node:fs';
import path from 'node:path';
import { isS3, localCopy, putContentAddressed } from '../config/artifacts';
import type { CampaignSpec } from '../config/spec';

/**
 * What `run` and `schedule create` hand the campaign: the spec with its data files copied into the artifact store,
 * content-addressed (`<root>/data/sha256-<hash>.jsonl`), so workers on any host read the same bytes and a schedule
 * trains next week on the data it was created with. `data.reread: true` keeps the paths/URIs as they are (each run
 * reads them then). Returns the spec to start and, for validation, local copies of the data.
 */
export async function stageCampaignData(
  spec: CampaignSpec,
  artifactRoot: string,
): Promise<{ spec: CampaignSpec; local: { train: string; eval: string } }> {
  const local = { train: await localCopy(spec.data.train), eval: await localCopy(spec.data.eval) };
  if (spec.data.reread) return { spec, local };
  const stage = async (location: string, file: string) => {
    const body = fs.readFileSync(file);
    const suffix = path.extname(isS3(location) ? location.split('/').pop()! : location) || '.jsonl';
    return (await putContentAddressed(artifactRoot, 'data', body, suffix)).location;
  };
  const staged = { ...spec.data, train: await stage(spec.data.train, local.train), eval: await stage(spec.data.eval, local.eval) };
  return { spec: { ...spec, data: staged }, local };
}

import fs from 'node:fs';
import path from 'node:path';
import { isS3, putContentAddressed } from '../config/io/artifacts';
import type { CampaignSpec } from '../config/io/spec';

/**
 * What `run` and `schedule create` hand the campaign: the spec with its data files copied into the artifact store,
 * content-addressed (`<root>/data/sha256-<hash>.jsonl`), so workers on any host read the same bytes and a schedule
 * trains next week on the data it was created with. `data.reread: true` keeps the paths/URIs as they are (each run
 * reads them then). Returns the spec to start.
 */
export async function stageCampaignData(
  spec: CampaignSpec,
  /** The data as local files: `withLocalData(spec).data`, what validation read. */
  local: { train: string; eval: string },
  artifactRoot: string,
): Promise<CampaignSpec> {
  if (spec.data.reread) return spec;
  const stage = async (location: string, file: string) => {
    const body = fs.readFileSync(file);
    const suffix = path.extname(isS3(location) ? location.split('/').pop()! : location) || '.jsonl';
    return (await putContentAddressed(artifactRoot, 'data', body, suffix)).location;
  };
  const staged = { ...spec.data, train: await stage(spec.data.train, local.train), eval: await stage(spec.data.eval, local.eval) };
  return { ...spec, data: staged };
}

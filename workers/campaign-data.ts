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
  /** The spec with its data as local files: `withLocalData(spec)`, what validation read. */
  local: CampaignSpec,
  artifactRoot: string,
): Promise<CampaignSpec> {
  const stage = async (location: string, file: string) => {
    const body = fs.readFileSync(file);
    const suffix = path.extname(isS3(location) ? location.split('/').pop()! : location) || '.jsonl';
    return (await putContentAddressed(artifactRoot, 'data', body, suffix)).location;
  };
  const copy = async <T extends { train: string; eval: string; test?: string; reread: boolean }>(data: T, files: T): Promise<T> =>
    data.reread
      ? data
      : {
          ...data,
          train: await stage(data.train, files.train),
          eval: await stage(data.eval, files.eval),
          ...(data.test ? { test: await stage(data.test, files.test!) } : {}),
        };
  if (!spec.stages) return { ...spec, data: await copy(spec.data, local.data) };
  // Each stage's data (a staged spec's own data is its first stage's).
  const stages = [];
  for (const [i, s] of spec.stages.entries()) stages.push({ ...s, data: await copy(s.data, local.stages![i]!.data) });
  return { ...spec, data: stages[0]!.data, stages };
}

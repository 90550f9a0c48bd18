import { joinLocation, readJson } from '../../config/io/artifacts';

/**
 * `ROUNDHOUSE_TEST_ARTIFACTS=s3 npx jest …` runs tests against an S3-compatible server: the global setup starts one
 * (moto's, test/helpers/s3-server.ts) and sets this variable to a bucket prefix, and the helpers below put the report
 * directories (where rounds write samples, reference logprobs, step records, evaluations and reports) under it.
 */
export const TEST_ARTIFACT_ROOT_ENV = 'ROUNDHOUSE_TEST_ARTIFACT_ROOT';

/** Where a test's reports go: `localDir` itself, or the same path under the S3 test root when one is set. */
export function testReportDir(localDir: string): string {
  const root = process.env[TEST_ARTIFACT_ROOT_ENV];
  return root ? joinLocation(root, localDir.replace(/^\/+/, '')) : localDir;
}

/** A JSON artifact a round wrote, from whichever store holds it; a missing one fails the test, naming it. */
export async function readArtifact<T = any>(location: string): Promise<T> {
  const value = await readJson<T>(location);
  if (value === undefined) throw new Error(`${location}: no such artifact`);
  return value;
}

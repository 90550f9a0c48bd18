import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NoSuchKey,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { parseS3, type ArtifactStore } from './artifact-store';
import { ConfigError } from '../rules/errors';

/**
 * The artifact store on S3 (or anything that speaks it), through the official AWS SDK v3. Settings are the SDK's
 * own environment: credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, a role), AWS_REGION, and
 * AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL for another service; ROUNDHOUSE_S3_FORCE_PATH_STYLE=true addresses
 * buckets by path (what MinIO, SeaweedFS and most local servers need).
 */
export function s3StoreFromEnv(env: NodeJS.ProcessEnv): ArtifactStore {
  const pathStyle = env.ROUNDHOUSE_S3_FORCE_PATH_STYLE;
  if (pathStyle !== undefined && !['true', 'false', ''].includes(pathStyle))
    throw new ConfigError('ROUNDHOUSE_S3_FORCE_PATH_STYLE', `must be true or false, got '${pathStyle}'`);
  const endpoint = env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL;
  // The SDK version is pinned (it supports Node 20); its notice that later versions will need Node 22 would land in
  // every CLI command's output. Set the variable to false to see it.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const client = new S3Client({
    region: env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1',
    ...(endpoint ? { endpoint } : {}),
    forcePathStyle: pathStyle === 'true',
    maxAttempts: 5,
  });
  return s3Store(client);
}

export function s3Store(client: S3Client): ArtifactStore {
  const missing = (err: unknown) =>
    err instanceof NoSuchKey || (err instanceof S3ServiceException && (err.$metadata.httpStatusCode === 404 || err.name === 'NotFound'));
  /** One PUT of the whole object; `ifNoneMatch: '*'` makes it a create that a key already there refuses (412). */
  const put = async (location: string, body: Buffer | string, contentType?: string, ifNoneMatch?: '*') => {
    const { bucket, key } = parseS3(location);
    await client.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: typeof body === 'string' ? Buffer.from(body) : body,
        ContentType: contentType,
        ...(ifNoneMatch ? { IfNoneMatch: ifNoneMatch } : {}),
      }),
    );
  };
  return {
    async read(location) {
      const { bucket, key } = parseS3(location);
      try {
        const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return Buffer.from(await res.Body!.transformToByteArray());
      } catch (err) {
        if (missing(err)) return undefined;
        throw err;
      }
    },
    async write(location, body, contentType) {
      // One PUT: S3 never shows part of an object.
      await put(location, body, contentType);
    },
    async create(location, body, contentType) {
      try {
        await put(location, body, contentType, '*');
        return true;
      } catch (err) {
        // 412: the key exists; 409: a concurrent conditional write to it is in progress (it wins or fails; either way not ours).
        const status = err instanceof S3ServiceException ? err.$metadata.httpStatusCode : undefined;
        if (status === 412 || status === 409) return false;
        throw err;
      }
    },
    async list(prefix) {
      const { bucket, key } = parseS3(prefix);
      const dir = key === '' || key.endsWith('/') ? key : `${key}/`;
      const out: string[] = [];
      let token: string | undefined;
      do {
        const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: dir, ContinuationToken: token }));
        for (const o of page.Contents ?? []) if (o.Key) out.push(`s3://${bucket}/${o.Key}`);
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return out.sort();
    },
    async exists(location) {
      const { bucket, key } = parseS3(location);
      try {
        await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
        return true;
      } catch (err) {
        if (missing(err)) return false;
        throw err;
      }
    },
  };
}

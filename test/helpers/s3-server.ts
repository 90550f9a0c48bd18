import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort } from './ports';
import { ensureVenv } from './python-venv';

/** The S3-compatible server the tests run (moto's standalone server from PyPI, pinned), installed into its own venv. */
export const S3_SERVER_REQUIREMENTS = ['moto[s3]==5.2.5', 'Flask==3.1.3', 'flask-cors==6.0.5'];

export interface RunningS3 {
  endpoint: string;
  /** The environment a worker or CLI needs to use it as its artifact store (with ROUNDHOUSE_ARTIFACTS). */
  env: Record<string, string>;
  /** Makes a bucket and returns its `s3://bucket` root. */
  bucket(name: string): Promise<string>;
  close(): Promise<void>;
}

const CREDENTIALS = { AWS_ACCESS_KEY_ID: 'roundhouse-test', AWS_SECRET_ACCESS_KEY: 'roundhouse-test-secret', AWS_REGION: 'us-east-1' };

/** Starts the S3 server on loopback (a real process speaking S3 over HTTP) and waits until it answers. */
export async function startS3Server(): Promise<RunningS3> {
  const python = ensureVenv('s3-server', S3_SERVER_REQUIREMENTS);
  const port = await freePort();
  // moto's server with S3's atomic conditional writes (s3_server.py says why).
  const child: ChildProcess = spawn(python, [path.join(__dirname, 's3_server.py'), '127.0.0.1', String(port)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const endpoint = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the S3 server exited (${child.exitCode}): ${stderr}`);
    try {
      if ((await fetch(`${endpoint}/`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() - started > 60_000) throw new Error(`the S3 server did not answer within 60 s: ${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const env = { ...CREDENTIALS, AWS_ENDPOINT_URL_S3: endpoint, ROUNDHOUSE_S3_FORCE_PATH_STYLE: 'true' };
  const client = new S3Client({
    region: CREDENTIALS.AWS_REGION,
    endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: CREDENTIALS.AWS_ACCESS_KEY_ID, secretAccessKey: CREDENTIALS.AWS_SECRET_ACCESS_KEY },
  });
  return {
    endpoint,
    env,
    async bucket(name) {
      await client.send(new CreateBucketCommand({ Bucket: name }));
      return `s3://${name}`;
    },
    async close() {
      client.destroy();
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
    },
  };
}

import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { root } from './helpers';

/**
 * The compose file is loaded by compose-go — the loader behind `docker compose config`: the Compose specification's
 * JSON schema, interpolation, profiles and references between services — built from scripts/compose-config (Go
 * module proxy; `.ci/run` builds it). No Docker engine is involved.
 */
const tool = path.join(root, '.roundhouse', 'bin', 'compose-config');

interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile: string };
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  profiles?: string[];
  env_file?: { path: string; required: boolean }[];
  environment?: Record<string, string>;
  command?: string[];
  network_mode?: string;
  volumes?: { type: string; source?: string; target: string }[];
  tmpfs?: string[];
  entrypoint?: string[];
}

function composeConfig(file: string, ...args: string[]): { status: number | null; stdout: string; stderr: string } {
  // A clean environment: the shell's variables take part in interpolation, as with `docker compose`.
  const r = spawnSync(tool, ['-f', file, '--env-file', path.join(root, '.env.example'), ...args], {
    encoding: 'utf8',
    timeout: 30_000,
    cwd: root,
    env: { PATH: process.env.PATH },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(() => {
  if (!fs.existsSync(tool)) {
    execFileSync('go', ['build', '-o', tool, '.'], { cwd: path.join(root, 'scripts', 'compose-config'), stdio: 'pipe', timeout: 240_000 });
  }
}, 300_000);

test('docker-compose.yml is a valid Compose file: PostgreSQL 16, schema and namespace jobs, Temporal 1.30.x, UI, the worker image, health-gated start order', () => {
  const r = composeConfig(path.join(root, 'docker-compose.yml'));
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const services = JSON.parse(r.stdout).services as Record<string, ComposeService>;
  expect(Object.keys(services).sort()).toEqual([
    'object-store',
    'object-store-bucket',
    'postgresql',
    'roundhouse-worker',
    'temporal',
    'temporal-namespace',
    'temporal-schema',
    'temporal-ui',
  ]);

  expect(services.postgresql!.image).toBe('postgres:16');
  expect(services.temporal!.image).toMatch(/^temporalio\/server:1\.30\.\d+$/);
  expect(services['temporal-schema']!.image).toMatch(/^temporalio\/admin-tools:1\.30\.\d+$/);
  expect(services['temporal-ui']!.image).toMatch(/^temporalio\/ui:/);
  const condition = (s: string, on: string) => services[s]!.depends_on?.[on]?.condition;
  expect(condition('temporal-schema', 'postgresql')).toBe('service_healthy');
  expect(condition('temporal', 'temporal-schema')).toBe('service_completed_successfully');
  expect(condition('temporal-namespace', 'temporal')).toBe('service_healthy');
  expect(condition('temporal-ui', 'temporal')).toBe('service_healthy');
  expect(condition('roundhouse-worker', 'temporal')).toBe('service_healthy');
  expect(condition('roundhouse-worker', 'temporal-namespace')).toBe('service_completed_successfully');
  expect(condition('object-store-bucket', 'object-store')).toBe('service_healthy');
  expect(condition('roundhouse-worker', 'object-store-bucket')).toBe('service_completed_successfully');
  for (const s of ['postgresql', 'temporal', 'temporal-ui', 'roundhouse-worker', 'object-store'])
    expect(services[s]!.healthcheck?.test.length).toBeGreaterThan(0);

  const worker = services['roundhouse-worker']!;
  expect(worker.build).toMatchObject({ dockerfile: 'Dockerfile' });
  expect(worker.command).toEqual(['worker', '--reaper', 'local']); // the reaper schedule is ensured on start
  expect(worker.env_file?.[0]).toMatchObject({ path: path.join(root, '.env'), required: false });
  expect(worker.environment).toMatchObject({ TEMPORAL_ADDRESS: 'temporal:7233', ROUNDHOUSE_METRICS_ADDRESS: '0.0.0.0:9464' });
  // Secrets come from the env file, never from the compose file itself.
  const secretLines = fs
    .readFileSync(path.join(root, 'docker-compose.yml'), 'utf8')
    .split('\n')
    .filter((l) => /^\s*[A-Z_]*(PASSWORD|PWD|API_KEY|KEYS|SECRET)[A-Z_]*:/.test(l));
  expect(secretLines.length).toBeGreaterThan(0);
  for (const line of secretLines) expect(line).toMatch(/:\s*\$\{/); // interpolated from .env
  expect(execFileSync('git', ['check-ignore', '.env'], { cwd: root, encoding: 'utf8' }).trim()).toBe('.env');
  expect(execFileSync('git', ['ls-files', '.env.example'], { cwd: root, encoding: 'utf8' }).trim()).toBe('.env.example');
});

test('workers share no volume: each has a tmpfs state directory, and artifacts go to the S3-compatible object store service, its bucket made by a one-shot job', () => {
  const r = composeConfig(path.join(root, 'docker-compose.yml'), '--profiles', 'emulator');
  expect(r.status).toBe(0);
  const services = JSON.parse(r.stdout).services as Record<string, ComposeService>;
  const worker = services['roundhouse-worker']!;
  expect(worker.volumes ?? []).toEqual([]);
  expect(worker.tmpfs).toEqual([worker.environment!.ROUNDHOUSE_STATE_DIR]);
  expect(worker.environment).toMatchObject({
    ROUNDHOUSE_ARTIFACTS: 's3://roundhouse/artifacts',
    AWS_ENDPOINT_URL_S3: 'http://object-store:8333',
    ROUNDHOUSE_S3_FORCE_PATH_STYLE: 'true',
    AWS_ACCESS_KEY_ID: 'roundhouse',
    AWS_SECRET_ACCESS_KEY: 'change-me', // .env.example's placeholder, interpolated
  });
  // No named volume is mounted by more than one service (the emulator's and the store's are their own).
  const mounts = Object.entries(services).flatMap(([name, s]) =>
    (s.volumes ?? []).filter((v) => v.type === 'volume').map((v) => [v.source!, name] as const),
  );
  const owners = new Map<string, Set<string>>();
  for (const [volume, name] of mounts) owners.set(volume, (owners.get(volume) ?? new Set()).add(name));
  for (const [volume, names] of owners) expect([volume, names.size]).toEqual([volume, 1]);
  const store = services['object-store']!;
  expect(store.image).toMatch(/^chrislusf\/seaweedfs:/);
  expect(store.volumes?.map((v) => v.target)).toEqual(expect.arrayContaining(['/data', '/scripts/start-seaweedfs.sh']));
  expect(services['object-store-bucket']!.environment).toMatchObject({
    AWS_ENDPOINT_URL_S3: 'http://object-store:8333',
    BUCKET: 'roundhouse',
  });
  // The store's keys come from .env: the start script refuses to run without them.
  const script = fs.readFileSync(path.join(root, 'deploy', 'seaweedfs', 'start-seaweedfs.sh'), 'utf8');
  expect(script).toContain('${S3_SECRET_ACCESS_KEY:?');
  const missing = spawnSync('/bin/sh', [path.join(root, 'deploy', 'seaweedfs', 'start-seaweedfs.sh')], {
    env: { PATH: process.env.PATH },
    encoding: 'utf8',
  });
  expect(missing.status).not.toBe(0);
  expect(missing.stderr).toMatch(/ROUNDHOUSE_S3_ACCESS_KEY_ID/);
});

test('the emulator profile adds the local provider emulator beside the worker, healthy before use', () => {
  const r = composeConfig(path.join(root, 'docker-compose.yml'), '--profiles', 'emulator');
  expect(r.status).toBe(0);
  const services = JSON.parse(r.stdout).services as Record<string, ComposeService>;
  expect(services.emulator).toMatchObject({ profiles: ['emulator'], network_mode: 'service:roundhouse-worker' });
  expect(services.emulator!.command?.slice(0, 1)).toEqual(['emulator']);
  expect(services.emulator!.healthcheck?.test.join(' ')).toContain('/_emulator/health');
});

test('the codec profile adds the codec server for the Web UI, on loopback, with the UI as its CORS origin', () => {
  const r = composeConfig(path.join(root, 'docker-compose.yml'), '--profiles', 'codec');
  expect(r.status).toBe(0);
  const codec = (
    JSON.parse(r.stdout).services as Record<string, ComposeService & { ports?: { host_ip: string; published: string; target: number }[] }>
  )['codec-server']!;
  expect(codec.command).toEqual(['codec-server', '--host', '0.0.0.0', '--port', '8888', '--cors-origin', 'http://localhost:8080']);
  expect(codec.ports?.[0]).toMatchObject({ host_ip: '127.0.0.1', published: '8888', target: 8888 });
  // Its authentication is wired: the token (and the JWKS settings) reach it; without them it refuses to start.
  expect(Object.keys(codec.environment ?? {})).toEqual(
    expect.arrayContaining([
      'ROUNDHOUSE_CODEC_TOKEN',
      'ROUNDHOUSE_CODEC_JWKS_URL',
      'ROUNDHOUSE_CODEC_JWT_AUDIENCE',
      'ROUNDHOUSE_CODEC_JWT_ISSUER',
    ]),
  );
});

test('the validator rejects what the Compose specification forbids (so a pass means something)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-compose-'));
  const bad = (name: string, yaml: string) => {
    const file = path.join(dir, `${name}.yml`);
    fs.writeFileSync(file, yaml);
    return composeConfig(file);
  };
  const unknownCondition = bad(
    'condition',
    'services:\n  a: { image: x, depends_on: { b: { condition: service_ready } } }\n  b: { image: y }\n',
  );
  expect(unknownCondition.status).toBe(1);
  expect(unknownCondition.stderr).toMatch(/condition/);
  const unknownService = bad('missing', 'services:\n  a: { image: x, depends_on: { nope: { condition: service_healthy } } }\n');
  expect(unknownService.status).toBe(1);
  expect(unknownService.stderr).toMatch(/nope/);
  const unknownKey = bad('key', 'services:\n  a: { image: x, helthcheck: { test: [CMD, "true"] } }\n');
  expect(unknownKey.status).toBe(1);
  expect(unknownKey.stderr).toMatch(/helthcheck/);
  const missingSecret = spawnSync(tool, ['-f', path.join(root, 'docker-compose.yml'), '--env-file', path.join(dir, 'condition.yml')], {
    encoding: 'utf8',
    cwd: dir,
    env: { PATH: process.env.PATH },
  });
  expect(missingSecret.status).toBe(1);
  expect(missingSecret.stderr).toMatch(/POSTGRES_PASSWORD/); // required variables must be set
});

test('the Dockerfile is multi-stage, installs production dependencies only, ships the prebuilt bundle and runs as a non-root user', () => {
  const dockerfile = fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8');
  const stages = dockerfile.match(/^FROM\s+\S+/gm) ?? [];
  expect(stages.length).toBeGreaterThanOrEqual(2);
  expect(dockerfile).toMatch(/npm ci --omit=dev/);
  expect(dockerfile).toMatch(/RUN npm run build/);
  expect(dockerfile).toMatch(/ROUNDHOUSE_WORKFLOW_BUNDLE=\/app\/dist\/workflow-bundle\.js/);
  const users = dockerfile.match(/^USER\s+(\S+)/gm) ?? [];
  expect(users.at(-1)).toMatch(/^USER\s+(?!root\b|0\b)\S+/);
  // Everything the build stage copies exists, and .dockerignore keeps secrets and local state out of the context.
  for (const [, src] of dockerfile.matchAll(/^COPY\s+(?!--from)(\S+)/gm)) {
    expect(fs.existsSync(path.join(root, src!))).toBe(true);
  }
  const ignored = fs.readFileSync(path.join(root, '.dockerignore'), 'utf8').split('\n');
  expect(ignored).toEqual(expect.arrayContaining(['.env', '.roundhouse', 'node_modules']));
});

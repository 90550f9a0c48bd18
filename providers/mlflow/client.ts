import { request as undiciRequest } from 'undici';
import { z } from 'zod';
import { ProviderError } from '../errors';
import { HttpClient } from '../http';

/**
 * The MLflow tracking server's REST API (2.0), what Roundhouse logs through: experiments, runs (nested by the
 * `mlflow.parentRunId` tag), batched metrics/params/tags with explicit steps and timestamps, run status, and
 * artifacts through the server's artifact proxy (`mlflow server`'s default `--serve-artifacts`). Credentials come
 * only from the worker's environment, as MLflow's own clients read them: MLFLOW_TRACKING_TOKEN (bearer) or
 * MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (basic).
 */

export interface MlflowMetric {
  key: string;
  value: number;
  /** Epoch milliseconds. A metric logged twice with the same key, step, timestamp and value is stored once. */
  timestamp: number;
  step: number;
}

export interface MlflowCredentials {
  token?: string;
  username?: string;
  password?: string;
}

/** MLflow's batch limits (log-batch): 1000 metrics, 100 params, 100 tags per request. */
const MAX_METRICS = 1000;
const MAX_PARAMS = 100;
const MAX_TAGS = 100;
/** The longest param value MLflow stores (6000 since 2.x; older servers 500). */
export const MAX_PARAM_VALUE = 6000;

const RunInfo = z.object({ run_id: z.string(), experiment_id: z.string(), artifact_uri: z.string().optional() });
const RunAnswer = z.object({ run: z.object({ info: RunInfo, data: z.unknown().optional() }) });
const Empty = z.unknown();

export function credentialsFromEnv(env: NodeJS.ProcessEnv): MlflowCredentials {
  return { token: env.MLFLOW_TRACKING_TOKEN, username: env.MLFLOW_TRACKING_USERNAME, password: env.MLFLOW_TRACKING_PASSWORD };
}

export class MlflowClient {
  private readonly http: HttpClient;
  /** Basic credentials (the HTTP client sends a token itself). */
  private readonly headers: Record<string, string>;
  /** Every credential, for the artifact upload (a raw request). */
  private readonly auth: Record<string, string>;

  constructor(
    readonly uri: string,
    credentials: MlflowCredentials = {},
  ) {
    const basic = credentials.username !== undefined && !credentials.token;
    this.http = new HttpClient({
      baseUrl: uri,
      apiKey: credentials.token,
      userAgent: 'roundhouse-mlflow',
      maxRetries: 4,
      requestTimeoutMs: 60_000,
      connections: 8,
    });
    this.headers = basic
      ? { authorization: `Basic ${Buffer.from(`${credentials.username}:${credentials.password ?? ''}`).toString('base64')}` }
      : {};
    this.auth = credentials.token ? { authorization: `Bearer ${credentials.token}` } : this.headers;
  }

  /** The experiment's id, creating it when missing (a concurrent create is fine). */
  async experimentId(name: string): Promise<string> {
    const Answer = z.object({ experiment: z.object({ experiment_id: z.string() }) });
    const get = () =>
      this.http
        .request({
          method: 'GET',
          path: '/api/2.0/mlflow/experiments/get-by-name',
          query: { experiment_name: name },
          schema: Answer,
          headers: this.headers,
        })
        .then((a) => a.experiment.experiment_id);
    try {
      return await get();
    } catch (err) {
      if (!(err instanceof ProviderError && err.code === 'NOT_FOUND')) throw err;
    }
    try {
      const created = await this.http.request({
        method: 'POST',
        path: '/api/2.0/mlflow/experiments/create',
        body: { name },
        replaySafe: true, // a replay answers RESOURCE_ALREADY_EXISTS, handled below
        schema: z.object({ experiment_id: z.string() }),
        headers: this.headers,
      });
      return created.experiment_id;
    } catch (err) {
      if (err instanceof ProviderError && err.providerCode === 'RESOURCE_ALREADY_EXISTS') return get();
      throw err;
    }
  }

  /** The run tagged `key = value` in the experiment, if there is one (the oldest, should there be two). */
  async findRun(experimentId: string, tag: string, value: string): Promise<string | undefined> {
    const Answer = z.object({ runs: z.array(z.object({ info: RunInfo })).optional() });
    const answer = await this.http.request({
      method: 'POST',
      path: '/api/2.0/mlflow/runs/search',
      body: {
        experiment_ids: [experimentId],
        filter: `tags.\`${tag}\` = '${value.replace(/'/g, "\\'")}'`,
        max_results: 10,
        order_by: ['attributes.start_time ASC'],
      },
      replaySafe: true,
      schema: Answer,
      headers: this.headers,
    });
    return answer.runs?.[0]?.info.run_id;
  }

  async createRun(experimentId: string, run: { name: string; startTime: number; tags: Record<string, string> }): Promise<string> {
    const answer = await this.http.request({
      method: 'POST',
      path: '/api/2.0/mlflow/runs/create',
      body: {
        experiment_id: experimentId,
        run_name: run.name,
        start_time: run.startTime,
        tags: Object.entries(run.tags).map(([key, value]) => ({ key, value })),
      },
      replaySafe: false, // a replayed create would make a second run: callers search by tag first
      schema: RunAnswer,
      headers: this.headers,
    });
    return answer.run.info.run_id;
  }

  async getRun(runId: string): Promise<z.infer<typeof RunInfo>> {
    const answer = await this.http.request({
      method: 'GET',
      path: '/api/2.0/mlflow/runs/get',
      query: { run_id: runId },
      schema: RunAnswer,
      headers: this.headers,
    });
    return answer.run.info;
  }

  /** Metrics, params and tags, in as many batches as MLflow's limits need. */
  async logBatch(
    runId: string,
    batch: { metrics?: MlflowMetric[]; params?: Record<string, string>; tags?: Record<string, string> },
  ): Promise<void> {
    const metrics = batch.metrics ?? [];
    const params = Object.entries(batch.params ?? {}).map(([key, value]) => ({ key, value: value.slice(0, MAX_PARAM_VALUE) }));
    const tags = Object.entries(batch.tags ?? {}).map(([key, value]) => ({ key, value }));
    const rounds = Math.max(
      Math.ceil(metrics.length / MAX_METRICS),
      Math.ceil(params.length / MAX_PARAMS),
      Math.ceil(tags.length / MAX_TAGS),
    );
    for (let i = 0; i < rounds; i++) {
      await this.http.request({
        method: 'POST',
        path: '/api/2.0/mlflow/runs/log-batch',
        body: {
          run_id: runId,
          metrics: metrics.slice(i * MAX_METRICS, (i + 1) * MAX_METRICS),
          params: params.slice(i * MAX_PARAMS, (i + 1) * MAX_PARAMS),
          tags: tags.slice(i * MAX_TAGS, (i + 1) * MAX_TAGS),
        },
        replaySafe: true, // same params, tags and (key, step, timestamp, value) metrics: stored once
        schema: Empty,
        headers: this.headers,
      });
    }
  }

  async setStatus(runId: string, status: 'RUNNING' | 'FINISHED' | 'FAILED' | 'KILLED', endTime?: number): Promise<void> {
    await this.http.request({
      method: 'POST',
      path: '/api/2.0/mlflow/runs/update',
      body: { run_id: runId, status, ...(endTime !== undefined ? { end_time: endTime } : {}) },
      replaySafe: true,
      schema: Empty,
      headers: this.headers,
    });
  }

  /**
   * Uploads an artifact through the server's artifact proxy; false when the run's artifacts are not served by the
   * tracking server (an `--no-serve-artifacts` server's runs point at a store the client must write itself).
   */
  async uploadArtifact(runId: string, artifactPath: string, body: Buffer | string, contentType: string): Promise<boolean> {
    const info = await this.getRun(runId);
    const proxied = /^mlflow-artifacts:\/(.*)$/.exec(info.artifact_uri ?? '');
    if (!proxied) return false;
    const base = proxied[1]!.replace(/^\/+/, '').replace(/^[^/]*:\d+\//, ''); // mlflow-artifacts://host:port/path too
    const url = `${this.uri.replace(/\/+$/, '')}/api/2.0/mlflow-artifacts/artifacts/${base}/${artifactPath.split('/').map(encodeURIComponent).join('/')}`;
    for (let attempt = 0; ; attempt++) {
      const res = await undiciRequest(url, {
        method: 'PUT',
        body,
        headers: { 'content-type': contentType, ...this.auth },
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      const text = await res.body.text();
      if (res.statusCode >= 200 && res.statusCode < 300) return true;
      if (attempt < 3 && (res.statusCode === 429 || res.statusCode >= 500)) {
        await new Promise((r) => setTimeout(r, 500 * 2 ** attempt));
        continue;
      }
      throw new ProviderError(
        `HTTP_${res.statusCode}`,
        'retryable',
        `PUT mlflow artifact ${artifactPath}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`,
        {
          status: res.statusCode,
        },
      );
    }
  }

  // ── Model Registry: a model line's versions and its `champion` alias ──

  /** The registered model, created when missing (a concurrent or replayed create is fine). */
  async ensureRegisteredModel(name: string, description?: string): Promise<void> {
    try {
      await this.http.request({
        method: 'POST',
        path: '/api/2.0/mlflow/registered-models/create',
        body: { name, ...(description ? { description } : {}) },
        replaySafe: true, // a replay answers RESOURCE_ALREADY_EXISTS
        schema: z.unknown(),
        headers: this.headers,
      });
    } catch (err) {
      if (!(err instanceof ProviderError && err.providerCode === 'RESOURCE_ALREADY_EXISTS')) throw err;
    }
  }

  /** Every version of a registered model, with its tags. */
  async modelVersions(name: string): Promise<{ version: string; tags: Record<string, string>; aliases: string[] }[]> {
    const Answer = z.object({
      model_versions: z
        .array(
          z.object({
            version: z.string(),
            tags: z.array(z.object({ key: z.string(), value: z.string() })).optional(),
            aliases: z.array(z.string()).optional(),
          }),
        )
        .optional(),
    });
    const answer = await this.http.request({
      method: 'GET',
      path: '/api/2.0/mlflow/model-versions/search',
      query: { filter: `name='${name.replace(/'/g, "\\'")}'`, max_results: 10000 },
      schema: Answer,
      headers: this.headers,
    });
    return (answer.model_versions ?? []).map((v) => ({
      version: v.version,
      tags: Object.fromEntries((v.tags ?? []).map((t) => [t.key, t.value])),
      aliases: v.aliases ?? [],
    }));
  }

  /** A new version of the registered model (not replay-safe: callers look for theirs by tag first). */
  async createModelVersion(
    name: string,
    version: { source: string; runId: string; tags: Record<string, string>; description?: string },
  ): Promise<string> {
    const answer = await this.http.request({
      method: 'POST',
      path: '/api/2.0/mlflow/model-versions/create',
      body: {
        name,
        source: version.source,
        run_id: version.runId,
        tags: Object.entries(version.tags).map(([key, value]) => ({ key, value })),
        ...(version.description ? { description: version.description } : {}),
      },
      replaySafe: false,
      schema: z.object({ model_version: z.object({ version: z.string() }) }),
      headers: this.headers,
    });
    return answer.model_version.version;
  }

  /** Points the alias at the version (setting it where it already points changes nothing). */
  async setAlias(name: string, alias: string, version: string): Promise<void> {
    await this.http.request({
      method: 'POST',
      path: '/api/2.0/mlflow/registered-models/alias',
      body: { name, alias, version },
      replaySafe: true,
      schema: z.unknown(),
      headers: this.headers,
    });
  }

  /** The version an alias points at, if it is set. */
  async aliasVersion(name: string, alias: string): Promise<string | undefined> {
    try {
      const answer = await this.http.request({
        method: 'GET',
        path: '/api/2.0/mlflow/registered-models/alias',
        query: { name, alias },
        schema: z.object({ model_version: z.object({ version: z.string() }) }),
        headers: this.headers,
      });
      return answer.model_version.version;
    } catch (err) {
      // MLflow 3 answers an unset alias with 400 INVALID_PARAMETER_VALUE "… alias champion not found".
      const unset =
        err instanceof ProviderError &&
        (err.code === 'NOT_FOUND' ||
          err.providerCode === 'RESOURCE_DOES_NOT_EXIST' ||
          (err.providerCode === 'INVALID_PARAMETER_VALUE' && /alias .* not found/i.test(err.message)));
      if (unset) return undefined;
      throw err;
    }
  }

  /** A metric's history (tests and tools read what was logged back). */
  async metricHistory(runId: string, key: string): Promise<{ step: number; value: number; timestamp: number }[]> {
    const Answer = z.object({
      metrics: z.array(z.object({ step: z.coerce.number(), value: z.number(), timestamp: z.coerce.number() })).optional(),
    });
    const answer = await this.http.request({
      method: 'GET',
      path: '/api/2.0/mlflow/metrics/get-history',
      query: { run_id: runId, metric_key: key, max_results: 25000 },
      schema: Answer,
      headers: this.headers,
    });
    return answer.metrics ?? [];
  }
}

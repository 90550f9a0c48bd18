import { z } from 'zod';
import { ProviderError } from '../errors';
import type { HttpClient, RequestSpec } from '../http';

/** The SDK version whose wire this client speaks (WIRE.md); sent where the SDK sends its own. */
export const TINKER_WIRE_VERSION = '0.38.0';
export const AnyJson = z.unknown();

/** Requests to a Tinker server under the credential it wants: its key, or a JWT exchanged for it. Every part of the client sends through one. */
export class TinkerApi {
  /** Whether the service wants JWTs (asked once, from `client/config`), and the current one. */
  private jwtMode: Promise<boolean> | undefined;
  private jwt: { value: string; exp: number; refreshAt: number } | undefined;
  private exchange: Promise<void> | undefined;

  constructor(
    private readonly http: HttpClient,
    private readonly onSecret: ((value: string) => void) | undefined,
  ) {}

  /**
   * The credential requests carry in `X-API-Key`: the key itself, or, when the service's `client/config` says
   * `pjwt_auth_enabled`, a JWT from `auth/token` (exchanged with the key, refreshed at half its lifetime or within
   * 60 s of its expiry, and once more when a request is refused with `invalid_token`), as the SDK does.
   */
  private async credential(force = false): Promise<Record<string, string>> {
    this.jwtMode ??= this.http
      .request({
        method: 'POST',
        path: '/api/v1/client/config',
        body: { sdk_version: TINKER_WIRE_VERSION },
        replaySafe: true,
        schema: z.object({ pjwt_auth_enabled: z.boolean().nullish() }).passthrough(),
      })
      .then((c) => c.pjwt_auth_enabled === true)
      .catch((err: unknown) => {
        this.jwtMode = undefined; // asked again next time
        throw err;
      });
    if (!(await this.jwtMode)) return {};
    const now = Date.now() / 1000;
    const token = this.jwt;
    const stale = !token || now >= token.refreshAt || token.exp - now <= 60;
    if (force || stale) {
      this.exchange ??= this.http
        .request({
          method: 'POST',
          path: '/api/v1/auth/token',
          body: {},
          replaySafe: true,
          schema: z.object({ jwt: z.string() }).passthrough(),
        })
        .then(({ jwt }) => {
          this.onSecret?.(jwt);
          const claims = jwtClaims(jwt);
          this.jwt = { value: jwt, exp: claims.exp, refreshAt: claims.iat + (claims.exp - claims.iat) / 2 };
        })
        .finally(() => (this.exchange = undefined));
      await this.exchange;
    }
    return { 'x-api-key': this.jwt!.value };
  }

  /** A request with the current credential; a JWT refused as `invalid_token` is exchanged again and the request sent once more. */
  async call<T>(spec: RequestSpec<T>): Promise<T> {
    try {
      return await this.http.request({ ...spec, headers: { ...spec.headers, ...(await this.credential()) } });
    } catch (err) {
      if (!(this.jwt && err instanceof ProviderError && err.status === 401)) throw err;
      return this.http.request({ ...spec, headers: { ...spec.headers, ...(await this.credential(true)) } });
    }
  }

  async callRaw(spec: Omit<RequestSpec<unknown>, 'schema'>): Promise<{ status: number; contentType: string; bytes: Buffer }> {
    try {
      return await this.http.requestRaw({ ...spec, headers: { ...spec.headers, ...(await this.credential()) } });
    } catch (err) {
      if (!(this.jwt && err instanceof ProviderError && err.status === 401)) throw err;
      return this.http.requestRaw({ ...spec, headers: { ...spec.headers, ...(await this.credential(true)) } });
    }
  }

  post<T>(path: string, body: Record<string, unknown>, schema: z.ZodType<T>, options: { replaySafe?: boolean; key?: string } = {}) {
    return this.call({
      method: 'POST',
      path: `/api/v1${path}`,
      body,
      schema,
      ...(options.key ? { idempotencyKey: options.key, idempotencyHeader: 'x-idempotency-key' } : {}),
      ...(options.replaySafe !== undefined ? { replaySafe: options.replaySafe } : {}),
    });
  }

  async close(): Promise<void> {
    await this.http.close();
  }
}

/** A JWT's `iat` and `exp` (seconds), read without verifying it (the service does). */
function jwtClaims(jwt: string): { iat: number; exp: number } {
  try {
    const claims = JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as { iat?: unknown; exp?: unknown };
    const exp = Number(claims.exp);
    const iat = Number(claims.iat ?? Date.now() / 1000);
    if (!Number.isFinite(exp)) throw new Error('no exp');
    return { iat: Number.isFinite(iat) ? iat : Date.now() / 1000, exp };
  } catch (err) {
    throw new ProviderError(
      'BAD_RESPONSE',
      'non-retryable',
      `auth/token answered a token that is not a JWT with an exp: ${(err as Error).message}`,
    );
  }
}

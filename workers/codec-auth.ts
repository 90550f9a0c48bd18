import crypto from 'node:crypto';
import fs from 'node:fs';
import { ConfigError } from '../config/rules/errors';

/**
 * Who may call the codec server: it decrypts any payload it is sent, so every request must carry
 * `Authorization: Bearer <credential>`. The credential is a shared token (from the environment or a file), or a
 * JWT signed by a key of a JWKS (what the Temporal Web UI forwards with `TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true`:
 * the signed-in user's access token), checked for expiry, and for audience and issuer when configured.
 */
export interface CodecAuthOptions {
  tokens?: string[];
  jwt?: { jwksUrl: string; audience?: string; issuer?: string };
}

export type CodecAuthResult = { ok: true; who: string } | { ok: false; reason: string };

export type CodecAuthenticator = (authorization: string | undefined) => Promise<CodecAuthResult>;

/** The settings from the environment; throws a ConfigError naming the variable when none is given or one is bad. */
export function codecAuthFromEnv(env: NodeJS.ProcessEnv = process.env): CodecAuthOptions {
  const { ROUNDHOUSE_CODEC_TOKEN: token, ROUNDHOUSE_CODEC_TOKEN_FILE: tokenFile } = env;
  if (token && tokenFile)
    throw new ConfigError('ROUNDHOUSE_CODEC_TOKEN_FILE', 'set either ROUNDHOUSE_CODEC_TOKEN or ROUNDHOUSE_CODEC_TOKEN_FILE, not both');
  let tokens: string[] | undefined;
  if (tokenFile) {
    if (!fs.existsSync(tokenFile)) throw new ConfigError('ROUNDHOUSE_CODEC_TOKEN_FILE', `no such file: ${tokenFile}`);
    tokens = [fs.readFileSync(tokenFile, 'utf8').trim()];
  } else if (token) tokens = [token.trim()];
  if (tokens && tokens[0]!.length < 16)
    throw new ConfigError(
      tokenFile ? 'ROUNDHOUSE_CODEC_TOKEN_FILE' : 'ROUNDHOUSE_CODEC_TOKEN',
      'must be at least 16 characters (e.g. `openssl rand -hex 32`)',
    );
  const jwksUrl = env.ROUNDHOUSE_CODEC_JWKS_URL;
  if (jwksUrl && !/^https?:\/\//.test(jwksUrl))
    throw new ConfigError('ROUNDHOUSE_CODEC_JWKS_URL', `must be an http(s) URL, got '${jwksUrl}'`);
  for (const name of ['ROUNDHOUSE_CODEC_JWT_AUDIENCE', 'ROUNDHOUSE_CODEC_JWT_ISSUER'])
    if (env[name] && !jwksUrl) throw new ConfigError(name, 'needs ROUNDHOUSE_CODEC_JWKS_URL');
  const options: CodecAuthOptions = {
    ...(tokens ? { tokens } : {}),
    ...(jwksUrl
      ? {
          jwt: {
            jwksUrl,
            ...(env.ROUNDHOUSE_CODEC_JWT_AUDIENCE ? { audience: env.ROUNDHOUSE_CODEC_JWT_AUDIENCE } : {}),
            ...(env.ROUNDHOUSE_CODEC_JWT_ISSUER ? { issuer: env.ROUNDHOUSE_CODEC_JWT_ISSUER } : {}),
          },
        }
      : {}),
  };
  if (!options.tokens && !options.jwt)
    throw new ConfigError(
      'ROUNDHOUSE_CODEC_TOKEN',
      'the codec server decrypts for whoever calls it, so it needs authentication: set ROUNDHOUSE_CODEC_TOKEN (or _FILE), or ROUNDHOUSE_CODEC_JWKS_URL to verify the Web UI’s access tokens',
    );
  return options;
}

export function codecAuthenticator(options: CodecAuthOptions): CodecAuthenticator {
  const tokens = (options.tokens ?? []).map((t) => crypto.createHash('sha256').update(t).digest());
  const jwks = options.jwt ? new JwksCache(options.jwt.jwksUrl) : undefined;
  return async (authorization) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match) return { ok: false, reason: 'missing Authorization: Bearer <token>' };
    const presented = match[1]!;
    const digest = crypto.createHash('sha256').update(presented).digest();
    if (tokens.some((t) => crypto.timingSafeEqual(t, digest))) return { ok: true, who: 'token' };
    if (jwks && presented.split('.').length === 3) return verifyJwt(presented, jwks, options.jwt!);
    return { ok: false, reason: 'credential not accepted' };
  };
}

const ALGORITHMS: Record<string, { hash: string; ec?: boolean; pss?: boolean }> = {
  RS256: { hash: 'sha256' },
  RS384: { hash: 'sha384' },
  RS512: { hash: 'sha512' },
  PS256: { hash: 'sha256', pss: true },
  ES256: { hash: 'sha256', ec: true },
  ES384: { hash: 'sha384', ec: true },
};

async function verifyJwt(token: string, jwks: JwksCache, expect: NonNullable<CodecAuthOptions['jwt']>): Promise<CodecAuthResult> {
  const [h, p, s] = token.split('.') as [string, string, string];
  let header: { alg?: string; kid?: string };
  let claims: { exp?: number; nbf?: number; aud?: string | string[]; iss?: string; sub?: string };
  try {
    header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8')) as typeof header;
    claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as typeof claims;
  } catch {
    return { ok: false, reason: 'malformed JWT' };
  }
  const alg = header.alg ? ALGORITHMS[header.alg] : undefined;
  if (!alg) return { ok: false, reason: `JWT algorithm '${header.alg}' not accepted` };
  let key: crypto.KeyObject | undefined;
  try {
    key = await jwks.key(header.kid);
  } catch (err) {
    return { ok: false, reason: `JWKS unavailable: ${(err as Error).message}` };
  }
  if (!key) return { ok: false, reason: `no JWKS key '${header.kid ?? '(none)'}'` };
  const signed = Buffer.from(`${h}.${p}`);
  const signature = Buffer.from(s, 'base64url');
  const valid = crypto.verify(
    alg.hash,
    signed,
    {
      key,
      ...(alg.ec ? { dsaEncoding: 'ieee-p1363' as const } : {}),
      ...(alg.pss ? { padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: crypto.constants.RSA_PSS_SALTLEN_DIGEST } : {}),
    },
    signature,
  );
  if (!valid) return { ok: false, reason: 'JWT signature does not verify' };
  const now = Date.now() / 1000;
  const skew = 30;
  if (typeof claims.exp !== 'number') return { ok: false, reason: 'JWT has no exp' };
  if (claims.exp + skew < now) return { ok: false, reason: 'JWT expired' };
  if (typeof claims.nbf === 'number' && claims.nbf - skew > now) return { ok: false, reason: 'JWT not yet valid' };
  if (expect.issuer && claims.iss !== expect.issuer) return { ok: false, reason: 'JWT issuer not accepted' };
  if (expect.audience) {
    const aud = Array.isArray(claims.aud) ? claims.aud : claims.aud !== undefined ? [claims.aud] : [];
    if (!aud.includes(expect.audience)) return { ok: false, reason: 'JWT audience not accepted' };
  }
  return { ok: true, who: `jwt:${claims.sub ?? 'unknown'}` };
}

/** The JWKS, fetched on first use and kept 10 minutes; an unknown key id refetches it (at most every 30 s). */
class JwksCache {
  private keys = new Map<string, crypto.KeyObject>();
  private fetchedAt = 0;
  private pending: Promise<void> | undefined;

  constructor(private readonly url: string) {}

  async key(kid: string | undefined): Promise<crypto.KeyObject | undefined> {
    const age = Date.now() - this.fetchedAt;
    if (age > 600_000 || (!this.find(kid) && age > 30_000)) await this.refresh();
    return this.find(kid);
  }

  private find(kid: string | undefined): crypto.KeyObject | undefined {
    if (kid !== undefined) return this.keys.get(kid);
    return this.keys.size === 1 ? [...this.keys.values()][0] : undefined; // no kid: only an unambiguous set
  }

  private refresh(): Promise<void> {
    this.pending ??= (async () => {
      try {
        const res = await fetch(this.url, { signal: AbortSignal.timeout(10_000) });
        if (!res.ok) throw new Error(`GET ${this.url} answered ${res.status}`);
        const body = (await res.json()) as { keys?: (crypto.JsonWebKey & { kid?: string; use?: string })[] };
        const keys = new Map<string, crypto.KeyObject>();
        for (const [i, jwk] of (body.keys ?? []).entries()) {
          if (jwk.use && jwk.use !== 'sig') continue;
          try {
            keys.set(jwk.kid ?? `#${i}`, crypto.createPublicKey({ key: jwk, format: 'jwk' }));
          } catch {
            // a key type this server cannot use is skipped
          }
        }
        this.keys = keys;
        this.fetchedAt = Date.now();
      } finally {
        this.pending = undefined;
      }
    })();
    return this.pending;
  }
}

import { createHmac, randomUUID } from 'node:crypto';
import { ownerOf } from '../engine';
import { EmulatorHttpError } from '../errors';
import type { EmulatorRequest } from '../http';

/** `X-API-Key: tml-…` (or a JWT from `auth/token`) is the SDK's only auth header; the owner derives from the key. */
export function tinkerOwner(req: EmulatorRequest, jwt: JwtIssuer | undefined, keyAllowed: boolean): string {
  const key = req.headers['x-api-key'];
  if (typeof key !== 'string' || !(key.startsWith('tml-') || key.startsWith('eyJ')))
    throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'missing or malformed X-API-Key header; expected "tml-…"');
  if (key.startsWith('eyJ')) {
    if (!jwt) throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'JWTs are not issued here: client/config leaves pjwt_auth_enabled off');
    return jwt.verify(key);
  }
  if (jwt && !keyAllowed)
    throw new EmulatorHttpError(401, 'UNAUTHENTICATED', 'this service takes a JWT from /api/v1/auth/token', {
      'www-authenticate': 'Bearer error="invalid_token"',
    });
  return ownerOf(key);
}

/** HS256 JWTs naming the key's owner, signed with a secret of this emulator's. */
export class JwtIssuer {
  private readonly secret = randomUUID();
  /** Every token issued, in order (tests look for them where no credential may be). */
  readonly issued: string[] = [];
  constructor(private readonly lifetimeSeconds: number) {}

  issue(owner: string): string {
    const now = Math.floor(Date.now() / 1000);
    const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: owner, iat: now, exp: now + this.lifetimeSeconds })}`;
    const token = `${unsigned}.${createHmac('sha256', this.secret).update(unsigned).digest('base64url')}`;
    this.issued.push(token);
    return token;
  }

  verify(token: string): string {
    const [header, payload, signature] = token.split('.');
    const invalid = (why: string) =>
      new EmulatorHttpError(401, 'UNAUTHENTICATED', `invalid token: ${why}`, { 'www-authenticate': 'Bearer error="invalid_token"' });
    if (!header || !payload || !signature) throw invalid('malformed');
    if (createHmac('sha256', this.secret).update(`${header}.${payload}`).digest('base64url') !== signature) throw invalid('bad signature');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sub: string; exp: number };
    if (claims.exp <= Date.now() / 1000) throw invalid('expired');
    return claims.sub;
  }
}

import { Command, InvalidArgumentError } from 'commander';
import { ConfigError } from '../config/rules/errors';
import { modules } from './modules';

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('--port must be an integer from 0 to 65535');
  return n;
}

export function codecServerCommand(): Command {
  return new Command('codec-server')
    .description('Serve the payload codec (POST /encode, /decode) so the Temporal Web UI and CLI can show encrypted payloads')
    .option('--host <host>', 'address to bind (it answers only authenticated requests; still keep it private)', '127.0.0.1')
    .option('--port <port>', 'port; 0 picks a free one', port, 8888)
    .option(
      '--cors-origin <origin>',
      'a browser origin allowed to call it (repeatable)',
      (v: string, all: string[]) => [...all, v],
      [] as string[],
    )
    .addHelpText(
      'after',
      '\nAuthentication (required): ROUNDHOUSE_CODEC_TOKEN or ROUNDHOUSE_CODEC_TOKEN_FILE (a shared bearer token), and/or\nROUNDHOUSE_CODEC_JWKS_URL [+ ROUNDHOUSE_CODEC_JWT_AUDIENCE, ROUNDHOUSE_CODEC_JWT_ISSUER] to accept the access tokens\nthe Web UI forwards (TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true).\n\nExample:\n  ROUNDHOUSE_ENCRYPTION_KEYS=k1=... ROUNDHOUSE_CODEC_TOKEN=$(openssl rand -hex 32) roundhouse codec-server\n  temporal workflow show -w <id> --codec-endpoint http://127.0.0.1:8888 --codec-auth "Bearer $ROUNDHOUSE_CODEC_TOKEN"',
    )
    .action(async (opts: { host: string; port: number; corsOrigin: string[] }) => {
      const { codecAuthFromEnv, codecAuthenticator } = modules.codecAuth();
      const { startCodecServer } = modules.codecServer();
      const { AesGcmPayloadCodec } = modules.encryption();
      const { settings, logger } = modules.context().cliContext();
      if (!settings.encryption)
        throw new ConfigError('ROUNDHOUSE_ENCRYPTION_KEYS', 'is required for the codec server (or ROUNDHOUSE_ENCRYPTION_KEYS_FILE)');
      const auth = codecAuthFromEnv();
      const server = await startCodecServer({
        codec: new AesGcmPayloadCodec(settings.encryption),
        authenticate: codecAuthenticator(auth),
        onRefused: (reason, remote) => logger.warn({ reason, remote }, 'codec server refused a request'),
        host: opts.host,
        port: opts.port,
        corsOrigins: opts.corsOrigin,
      });
      process.stdout.write(`roundhouse codec server listening on ${server.url}\n`);
      logger.info(
        {
          url: server.url,
          keys: [...settings.encryption.keys.keys()],
          current: settings.encryption.currentKeyId,
          auth: [...(auth.tokens ? ['token'] : []), ...(auth.jwt ? [`jwt (${auth.jwt.jwksUrl})`] : [])],
        },
        'codec server started',
      );
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      await server.close();
    });
}

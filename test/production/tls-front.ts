import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';

export interface TestPki {
  dir: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  serverName: string;
}

/** A throwaway CA with a server and a client certificate (openssl), as a Temporal Cloud namespace uses for mTLS. */
export function makeTestPki(): TestPki {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-pki-'));
  const f = (name: string) => path.join(dir, name);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const serverName = 'temporal.roundhouse.test';
  ssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.pem'),
    '-days',
    '1',
    '-subj',
    '/CN=roundhouse test CA',
  );
  for (const [who, cn, ext] of [
    ['server', serverName, `subjectAltName=DNS:${serverName}\nextendedKeyUsage=serverAuth`],
    ['client', 'roundhouse-worker', 'extendedKeyUsage=clientAuth'],
  ] as const) {
    fs.writeFileSync(f(`${who}.ext`), `${ext}\n`);
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f(`${who}.key`), '-out', f(`${who}.csr`), '-subj', `/CN=${cn}`);
    ssl(
      'x509',
      '-req',
      '-in',
      f(`${who}.csr`),
      '-CA',
      f('ca.pem'),
      '-CAkey',
      f('ca.key'),
      '-CAcreateserial',
      '-out',
      f(`${who}.pem`),
      '-days',
      '1',
      '-extfile',
      f(`${who}.ext`),
    );
  }
  return {
    dir,
    ca: f('ca.pem'),
    serverCert: f('server.pem'),
    serverKey: f('server.key'),
    clientCert: f('client.pem'),
    clientKey: f('client.key'),
    serverName,
  };
}

export interface SeenRequest {
  path: string;
  authorization?: string;
  clientCertCn?: string;
}

export interface TlsFront {
  address: string;
  seen: SeenRequest[];
  close(): Promise<void>;
}

const HOP_HEADERS = new Set([':authority', ':scheme', 'connection', 'host']);

/**
 * A TLS front for the test's dev server, the way Temporal Cloud's edge looks to a client: TLS with a server name,
 * optionally demanding a client certificate (mTLS), and recording each gRPC call's path, bearer token and client
 * certificate. Calls are relayed as HTTP/2 to the plaintext dev server, trailers included.
 */
export async function startTlsFront(pki: TestPki, upstream: string, options: { requireClientCert: boolean }): Promise<TlsFront> {
  const seen: SeenRequest[] = [];
  const upstreamSession = http2.connect(`http://${upstream}`);
  upstreamSession.on('error', () => undefined);
  const server = http2.createSecureServer({
    key: fs.readFileSync(pki.serverKey),
    cert: fs.readFileSync(pki.serverCert),
    ca: fs.readFileSync(pki.ca),
    requestCert: options.requireClientCert,
    rejectUnauthorized: options.requireClientCert,
    ALPNProtocols: ['h2'],
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
  });
  server.on('stream', (stream, headers) => {
    const socket = stream.session?.socket as TLSSocket | undefined;
    const peer = socket?.getPeerCertificate?.();
    seen.push({
      path: String(headers[':path']),
      authorization: headers.authorization as string | undefined,
      clientCertCn: peer && 'subject' in peer && peer.subject ? (peer.subject.CN as string) : undefined,
    });
    const forwarded: http2.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(headers)) if (!HOP_HEADERS.has(k) && v !== undefined) forwarded[k] = v;
    const call = upstreamSession.request(forwarded);
    let trailers: http2.IncomingHttpHeaders = {};
    call.on('response', (responseHeaders, flags) => {
      const h = { ...responseHeaders };
      delete h[':status'];
      // A trailers-only gRPC answer ends the stream with its headers.
      if (flags & http2.constants.NGHTTP2_FLAG_END_STREAM)
        stream.respond({ ':status': responseHeaders[':status'], ...h }, { endStream: true });
      else stream.respond({ ':status': responseHeaders[':status'], ...h }, { waitForTrailers: true });
    });
    call.on('trailers', (t) => (trailers = t));
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    call.on('data', (chunk) => stream.write(chunk));
    call.on('end', () => {
      if (!stream.closed && !stream.writableEnded) stream.end();
    });
    call.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    stream.on('data', (chunk) => call.write(chunk));
    stream.on('end', () => call.end());
    stream.on('close', () => {
      if (!call.closed) call.close(http2.constants.NGHTTP2_CANCEL);
    });
    stream.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const session of sessions) session.destroy(); // long polls keep sessions open
        upstreamSession.destroy();
      }),
  };
}

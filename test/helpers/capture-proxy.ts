import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface CapturedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** How many requests (this one included) were open at the proxy when it arrived. */
  openOnArrival: number;
}

export interface CaptureProxy {
  url: string;
  /** Every request that reached the proxy, in arrival order, with its headers as the client sent them. */
  requests: CapturedRequest[];
  close(): Promise<void>;
}

/** Hop-by-hop headers (RFC 9110 §7.6.1): a proxy does not forward them. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade']);

function endToEnd(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !HOP_BY_HOP.has(name.toLowerCase())));
}

/**
 * A loopback HTTP proxy in front of `target` (e.g. the emulator) that records each request's method, path and
 * headers, then forwards it with its `Host` unchanged: URLs the target builds from `Host` (Baseten's trainer and
 * sampler `base_url`s) point back at the proxy, so every plane's traffic is seen.
 */
export async function startCaptureProxy(target: string): Promise<CaptureProxy> {
  const upstream = new URL(target);
  const requests: CapturedRequest[] = [];
  const sockets = new Set<Socket>();
  let open = 0;
  const server = http.createServer((req, res) => {
    open++;
    res.on('close', () => open--);
    requests.push({ method: req.method ?? 'GET', path: req.url ?? '/', headers: { ...req.headers }, openOnArrival: open });
    const forwarded = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: endToEnd(req.headers),
        agent: false,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, endToEnd(answer.headers));
        answer.pipe(res);
      },
    );
    forwarded.on('error', () => res.destroy());
    req.pipe(forwarded);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

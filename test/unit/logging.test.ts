import { Writable } from 'node:stream';
import { createLogger, registerSecret } from '../../config/io/logging';

function capture(): { stream: Writable; lines: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, lines: () => chunks.join('') };
}

test('key-like fields at any depth, bearer tokens and registered secret values never reach the log', () => {
  const out = capture();
  const logger = createLogger({ destination: out.stream, format: 'json' });
  registerSecret('tgp_live_0123456789abcdef');
  logger.info(
    { apiKey: 'k1-should-vanish', provider: { headers: { authorization: 'Bearer abc.def' }, api_key: 'k2-gone' }, steps: 3 },
    'calling with Bearer xyz123 and key tgp_live_0123456789abcdef',
  );
  logger.error({ err: new Error('request failed for tgp_live_0123456789abcdef') }, 'boom');
  const text = out.lines();
  for (const leaked of ['k1-should-vanish', 'k2-gone', 'abc.def', 'xyz123', 'tgp_live_0123456789abcdef']) {
    expect(text).not.toContain(leaked);
  }
  const first = JSON.parse(text.split('\n')[0]!);
  expect(first.steps).toBe(3);
  expect(first.apiKey).toBe('[redacted]');
  expect(first.msg).toBe('calling with Bearer [redacted] and key [redacted]');
});

test('the default text format is one plain line per event: time, level, message and key=value fields, still redacted', () => {
  const out = capture();
  const logger = createLogger({ destination: out.stream });
  logger.info({ address: '127.0.0.1:7233', note: 'two words', apiKey: 'k3-never-shown' }, 'Temporal server ready');
  const [line, ...rest] = out.lines().split('\n');
  expect(line).toMatch(/^\[\d\d:\d\d:\d\d\] INFO: Temporal server ready address=127\.0\.0\.1:7233 note="two words" apiKey=\[redacted\]$/);
  expect(rest.join('')).toBe('');
});

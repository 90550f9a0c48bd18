import fs from 'node:fs';
import path from 'node:path';

/**
 * Summarises V8 CPU profiles (`.cpuprofile`, as written by `--cpu-prof`; the bench writes them for its worker
 * processes when ROUNDHOUSE_BENCH_CPU_PROF=<dir> is set): self time by package or project folder, and the
 * hottest functions. `npx tsx bench/profile-summary.ts <file-or-dir>…`
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
}

function where(url: string): string {
  if (!url) return '(native / V8)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node core';
  const ours = /\/(activities|providers|workflows|workers|config|emulator|cli)\//.exec(url);
  return ours ? `roundhouse ${ours[1]}/` : path.basename(url);
}

export function summarise(profile: CpuProfile): { totalMs: number; byPlace: [string, number][]; byFunction: [string, number][] } {
  const msPerSample = (profile.endTime - profile.startTime) / 1000 / Math.max(1, profile.samples.length);
  const byPlace = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let totalMs = 0;
  for (const node of profile.nodes) {
    const ms = (node.hitCount ?? 0) * msPerSample;
    if (ms === 0) continue;
    const name = node.callFrame.functionName || '(anonymous)';
    if (name === '(idle)') continue;
    totalMs += ms;
    const place = !node.callFrame.url && name.startsWith('(') ? name : where(node.callFrame.url);
    byPlace.set(place, (byPlace.get(place) ?? 0) + ms);
    const fn = `${name} ${node.callFrame.url ? `${where(node.callFrame.url)}:${node.callFrame.lineNumber + 1}` : ''}`.trim();
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + ms);
  }
  const top = (m: Map<string, number>, n: number) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  return { totalMs, byPlace: top(byPlace, 12), byFunction: top(byFunction, 15) };
}

if (require.main === module) {
  const files = process.argv.slice(2).flatMap((p) =>
    fs.statSync(p).isDirectory()
      ? fs
          .readdirSync(p)
          .filter((f) => f.endsWith('.cpuprofile'))
          .map((f) => path.join(p, f))
      : [p],
  );
  for (const file of files) {
    const s = summarise(JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile);
    const pct = (ms: number) => `${((100 * ms) / s.totalMs).toFixed(1)}%`;
    process.stdout.write(`${path.basename(file)}: ${(s.totalMs / 1000).toFixed(1)} s on CPU (idle excluded)\n`);
    for (const [place, ms] of s.byPlace) process.stdout.write(`  ${pct(ms).padStart(6)}  ${place}\n`);
    process.stdout.write('  hottest functions (self time):\n');
    for (const [fn, ms] of s.byFunction) process.stdout.write(`  ${pct(ms).padStart(6)}  ${fn}\n`);
  }
}

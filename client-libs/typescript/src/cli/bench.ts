/**
 * The TypeScript client's benchmark (run by bench.sh through
 * client-libs/conformance/bench_language.py, beside the C library's in the same run):
 *
 *     node dist/src/cli/bench.js CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FP N_CACHE N_RT
 *
 * Prints one JSON line per measurement: the local-cache hit (`Client.check` answered from
 * SQLite), and legacy and extended round trips to the real notary (no cache). Bounded by the
 * iteration counts.
 *
 * @module
 */
import { Client } from "../node/client.js";

function summary(measurement: string, samples: number[]): string {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number): number => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  const r = (x: number): number => Math.round(x * 10) / 10;
  return JSON.stringify({ measurement, n: s.length, p50_us: r(q(0.5)), p99_us: r(q(0.99)), mean_us: r(mean) });
}

async function timed(n: number, f: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await f();
    out.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return out;
}

async function main(args: string[]): Promise<void> {
  if (args.length !== 8) throw new Error("usage: bench.js CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FP N_CACHE N_RT");
  const [cacheDir, legacyDir, extDir, host, portText, fp, nCacheText, nRtText] = args as [string, string, string, string, string, string, string, string];
  const port = Number(portText);
  const nCache = Number(nCacheText);
  const nRt = Number(nRtText);
  const cached = Client.load(cacheDir);
  const first = await cached.check(host, port, fp);
  if (!first.trusted) throw new Error(`the notary does not confirm ${host}:${port}: ${first.reason}`);
  await timed(Math.min(1000, nCache), () => cached.check(host, port, fp)); // warm-up
  const hits = await timed(nCache, async () => {
    const v = await cached.check(host, port, fp);
    if (!v.fromCache) throw new Error("not a cache hit");
  });
  process.stdout.write(summary("cache hit", hits) + "\n");
  cached.close();
  for (const [name, dir] of [["round trip, legacy", legacyDir], ["round trip, extended", extDir]] as const) {
    const c = Client.load(dir);
    await timed(10, () => c.check(host, port, fp));
    const rts = await timed(nRt, async () => {
      const v = await c.check(host, port, fp);
      if (!v.trusted || v.fromCache) throw new Error(`round trip failed: ${v.reason}`);
    });
    process.stdout.write(summary(name, rts) + "\n");
    c.close();
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});

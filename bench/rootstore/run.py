"""Restricted-root-store benchmark: CA verification cost, and its effect on forced probes.

    python -m bench.rootstore.run [--sites 600] [--trials 5] [--passes 5] [--quick]

1. Verification cost: every client-view chain of a synthetic world (leaf + intermediate,
   and the bad cases) verified against the full store (Mozilla's roots plus the world's)
   and against the top-10 store; time per chain and per presented certificate, for chains
   that pass and for chains that fail (a failure costs extra diagnosis).
2. Forced-probe throughput: a notary (``--no-tls``, fresh database each trial, so every
   request is a live probe) in ``--verifier perspective`` and ``--verifier both`` against
   the world's farm (another process); each trial runs both modes back to back, in
   alternating order, and the headline is the median of the per-trial ratios both/perspective.

Results: ``bench/results/rootstore.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.notary.procs import BenchError, Processes, cpu_seconds, free_port
from bench.notary.report import median
from bench.paths import results_path
from notary.ca.stores import full_store, read_pem_bundle
from notary.ca.verify import RootStore, verify_chain
from replay.rootstore.world import RootWorld, load_client_view

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
OUT = results_path("bench/results/rootstore.json")
CONCURRENCY = 32
REQUEST_TIMEOUT = 30.0


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def verification_cost(world: RootWorld, now: int, passes: int) -> dict[str, Any]:
    view = load_client_view(world.dir / "client-view.jsonl")
    full = full_store([world.dir / "roots.pem"])
    synthetic = RootStore("synthetic", read_pem_bundle(world.dir / "roots.pem"))
    ranking = sorted(synthetic.roots)  # any 10 of the world's roots: the cost does not care
    top10 = full.restrict(ranking[:10], "top-10")
    out: dict[str, Any] = {"chains": len(view), "passes": passes,
                           "full_store_roots": len(full), "top_k_roots": len(top10)}
    for name, store in (("full", full), ("top10", top10)):
        timings: dict[str, list[float]] = {"ok": [], "fail": []}
        certs: dict[str, int] = {"ok": 0, "fail": 0}
        for _ in range(passes):
            for v in view:
                chain = tuple(v["chain_der"])
                t0 = time.perf_counter()
                verdict = verify_chain(chain, v["host"], now, store)
                dt_s = time.perf_counter() - t0
                kind = "ok" if verdict.ok else "fail"
                timings[kind].append(dt_s)
                certs[kind] += len(chain)
        entry: dict[str, Any] = {}
        for kind in ("ok", "fail"):
            if timings[kind]:
                total = sum(timings[kind])
                entry[kind] = {
                    "chains": len(timings[kind]),
                    "us_per_chain_median": median(timings[kind]) * 1e6,
                    "us_per_chain_mean": total / len(timings[kind]) * 1e6,
                    "us_per_certificate_mean": total / certs[kind] * 1e6,
                }
        out[name] = entry
    return out


async def _drive(port: int, farm_port: int, view: list[dict[str, Any]]) -> dict[str, Any]:
    sem = asyncio.Semaphore(CONCURRENCY)
    statuses: dict[str, int] = {}
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)

    async def one(session: aiohttp.ClientSession, v: dict[str, Any]) -> None:
        import hashlib

        fp = hashlib.sha256(v["chain_der"][0]).hexdigest()
        async with sem:
            try:
                async with session.post(
                    f"http://{HOST}:{port}/target/{v['host']}+{farm_port}",
                    data=f"fingerprint={fp}".encode(),
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                ) as resp:
                    await resp.read()
                    key = str(resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                key = type(exc).__name__
        statuses[key] = statuses.get(key, 0) + 1

    conn = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(session, v) for v in view))
        elapsed = time.perf_counter() - t0
    return {"requests": len(view), "seconds": elapsed, "rate": len(view) / elapsed,
            "statuses": statuses}


def _notary_trial(work: Path, keys_dir: Path, world: RootWorld, farm_port: int, mode: str,
                  view: list[dict[str, Any]], trial: int) -> dict[str, Any]:
    data = work / f"notary-{mode}-{trial}"
    data.mkdir(parents=True)
    for name in ("notary.key", "notary.pem", "signing.key"):
        shutil.copy2(keys_dir / name, data / name)
    port = free_port()
    argv = [_python(), "-m", "notary.cli", "serve", "--data-dir", str(data), "--listen",
            f"{HOST}:{port}", "--no-tls", "--allow-target", "127.0.0.0/8", "--hosts-file",
            str(world.dir / "hosts"), "--rate-limit", "0", "--max-probes", "256",
            "--probe-timeout", "10", "--verifier", mode, "--ca-roots",
            str(world.dir / "roots.pem")]
    with Processes(work / "logs" / f"{mode}-{trial}") as ps:
        ps.start("notary", argv)
        ps.wait_http("notary", HOST, port, timeout=60)
        pid = ps.pid("notary")
        cpu0 = cpu_seconds(pid)
        result = asyncio.run(_drive(port, farm_port, view))
        cpu1 = cpu_seconds(pid)
    if cpu0 is not None and cpu1 is not None:
        result["server_cpu_us_per_request"] = (cpu1 - cpu0) / len(view) * 1e6
    result["mode"] = mode
    return result


def run(sites: int, trials: int, passes: int, out: Path | None) -> dict[str, Any]:
    now_dt = dt.datetime.now(dt.UTC)
    now = int(now_dt.timestamp())
    with tempfile.TemporaryDirectory(prefix="bench-rootstore-") as tmp:
        work = Path(tmp)
        world = RootWorld.build(work / "world", now_dt, sites=sites, roots=20, seed=11)
        print(f"world: {sites} sites, roles {world.manifest()['roles']}", flush=True)
        cost = verification_cost(world, now, passes)
        view = load_client_view(world.dir / "client-view.jsonl")
        keys_dir = work / "keys"
        with Processes(work / "logs" / "setup") as ps:
            ps.start("keygen", [_python(), "-m", "notary.cli", "keygen", "--data-dir",
                                str(keys_dir)])
            deadline = time.monotonic() + 60
            while not (keys_dir / "signing.key").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        farm_port = free_port()
        with Processes(work / "logs" / "farm") as farm:
            farm.start("farm", [_python(), "-m", "replay.cli", "rootstore", "serve",
                                str(world.dir), "--port", str(farm_port), "--seconds", "1800"])
            farm.wait_tcp("farm", HOST, farm_port, timeout=30)
            # warm-up (not counted): the farm's per-site TLS contexts and the page cache
            _notary_trial(work, keys_dir, world, farm_port, "perspective", view, -1)
            pairs: list[dict[str, Any]] = []
            for t in range(trials):
                order = ("perspective", "both") if t % 2 == 0 else ("both", "perspective")
                got = {m: _notary_trial(work, keys_dir, world, farm_port, m, view, t)
                       for m in order}
                pairs.append(got)
                print(f"trial {t}: perspective {got['perspective']['rate']:.0f}/s, "
                      f"both {got['both']['rate']:.0f}/s", flush=True)
    ratios = [p["both"]["rate"] / p["perspective"]["rate"] for p in pairs]
    doc: dict[str, Any] = {
        "benchmark": "rootstore",
        "when": now_dt.isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "verification": cost,
        "forced_probes": {
            "sites": sites, "trials": trials, "concurrency": CONCURRENCY,
            "perspective_rate_median": median([p["perspective"]["rate"] for p in pairs]),
            "both_rate_median": median([p["both"]["rate"] for p in pairs]),
            "ratio_both_over_perspective_median": median(ratios),
            "ratios": ratios,
            "perspective_cpu_us_per_request_median": _med(
                [p["perspective"].get("server_cpu_us_per_request") for p in pairs]),
            "both_cpu_us_per_request_median": _med(
                [p["both"].get("server_cpu_us_per_request") for p in pairs]),
            "trials_detail": pairs,
        },
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def _med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return median(vals) if vals else None


def print_summary(doc: dict[str, Any]) -> None:
    v = doc["verification"]
    print(f"\nCA verification ({v['chains']} chains x {v['passes']} passes)")
    print(f"{'store':<8} {'kind':<5} {'chains':>7} {'us/chain p50':>13} {'us/cert mean':>13}")
    for store in ("full", "top10"):
        for kind, e in v[store].items():
            print(f"{store:<8} {kind:<5} {e['chains']:>7} {e['us_per_chain_median']:>13.1f} "
                  f"{e['us_per_certificate_mean']:>13.1f}")
    f = doc["forced_probes"]
    print(f"\nforced probes ({f['sites']} per trial, {f['trials']} trials, "
          f"concurrency {f['concurrency']})")
    print(f"perspective: {f['perspective_rate_median']:.0f}/s   both: "
          f"{f['both_rate_median']:.0f}/s   ratio both/perspective (median of paired): "
          f"{f['ratio_both_over_perspective_median']:.3f}")
    if f["perspective_cpu_us_per_request_median"] and f["both_cpu_us_per_request_median"]:
        print(f"notary CPU per request: perspective "
              f"{f['perspective_cpu_us_per_request_median']:.0f} us, both "
              f"{f['both_cpu_us_per_request_median']:.0f} us")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rootstore.run")
    p.add_argument("--sites", type=int, default=600)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="120 sites, 2 trials, 2 passes")
    p.add_argument("--no-write", action="store_true", help="do not write the JSON result")
    args = p.parse_args(argv)
    sites, trials, passes = (120, 2, 2) if args.quick else (args.sites, args.trials,
                                                             args.passes)
    if not (10 <= sites <= 5000 and 1 <= trials <= 50 and 1 <= passes <= 100):
        print("sites 10..5000, trials 1..50, passes 1..100", file=sys.stderr)
        return 2
    try:
        doc = run(sites, trials, passes, None if args.no_write else OUT)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print_summary(doc)
    if not args.no_write:
        print(f"\nwrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

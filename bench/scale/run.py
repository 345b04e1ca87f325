"""Scale-out benchmark: workers, stores, metrics, and locust against wrk, in one run.

    python -m bench.scale.run [--seconds 3] [--trials 3] [--quick]

Everything runs on this machine, on loopback, in the same run, so the figures are ratios:

* cached validations (keep-alive HTTP, wrk) for: the trivial aiohttp+uvloop app (the
  baseline of ``bench/notary``), the notary with SQLite and with Redis, 1 and 2 worker
  processes, and SQLite/1 worker with metrics on (``--metrics-listen``);
* forced live probes (a fresh name per request and a wrong fingerprint, so each answer is a
  409 after its own probe of one ``openssl s_server``) for SQLite and Redis, 1 and 2 workers;
* locust (``loadtests/cached.py``, two worker processes, every answer's signature checked)
  against wrk for the same cached scenario on the same notary.

Trials of every configuration are interleaved and medians reported; every result counts the
answers that were not the expected status and ``Cache-Status``. Results go to
``bench/results/scale.json``. Bounded: about ``(6 + 4) * trials * seconds`` seconds of load
plus start-up and two locust runs (about 3 minutes with the defaults: 5 trials of 2 s).
The load average before and after the run is recorded: on a shared machine, compare runs
only when it is low.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.notary import stime, wrk
from bench.notary.certs import make_rsa_cert
from bench.notary.procs import BenchError, Processes, free_port
from bench.notary.run import (
    HIT,
    HOST,
    MISS,
    SITE,
    machine_info,
    notary_argv,
    trivial_argv,
    unexpected,
    warm,
)
from bench.paths import results_path

ROOT = Path(__file__).resolve().parents[2]
OUT = results_path("bench/results/scale.json")
REDIS_SERVER = "redis-server"

CACHED = [  # name, store, workers, metrics
    ("sqlite-1w", "sqlite", 1, False),
    ("sqlite-2w", "sqlite", 2, False),
    ("redis-1w", "redis", 1, False),
    ("redis-2w", "redis", 2, False),
    ("sqlite-1w-metrics", "sqlite", 1, True),
]
FORCED = [("sqlite-1w", "sqlite", 1), ("sqlite-2w", "sqlite", 2), ("redis-1w", "redis", 1),
          ("redis-2w", "redis", 2)]


def _log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def run_locust(url: str, cert: Path, targets: Path, work: Path, seconds: int,
               users: int) -> dict[str, Any]:
    """locust headless, two worker processes, for ``seconds``: rate and failures."""
    prefix = work / f"locust-{time.monotonic_ns()}"
    argv = [str(Path(sys.executable).parent / "locust"), "-f",
            str(ROOT / "loadtests" / "cached.py"), "--headless", "--only-summary",
            "--processes", "2", "-u", str(users), "-r", str(users), "-t", f"{seconds}s",
            "--stop-timeout", "2", "--host", url, "--notary-cert", str(cert),
            "--targets", str(targets), "--csv", str(prefix)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60,
                          cwd=ROOT)
    try:
        with Path(f"{prefix}_stats.csv").open() as fh:
            total = next(r for r in csv.DictReader(fh) if r["Name"] == "Aggregated")
    except (OSError, StopIteration) as exc:
        raise BenchError(f"locust wrote no stats ({proc.returncode}): {proc.stderr[-2000:]}"
                         ) from exc
    return {
        "requests": int(total["Request Count"]),
        "failures": int(total["Failure Count"]),
        "rate": float(total["Requests/s"]),
        "p50_ms": float(total["50%"]),
        "p99_ms": float(total["99%"]),
        "exit_code": proc.returncode,
        "users": users,
        "processes": 2,
    }


def measure(ps: Processes, work: Path, seconds: int, trials: int) -> dict[str, Any]:
    target = make_rsa_cert(work / "target", SITE)
    tport = free_port()
    ps.start("s_server", stime.s_server_argv(target, HOST, tport))
    ps.wait_tcp("s_server", HOST, tport)
    rport = free_port()
    ps.start("redis", [REDIS_SERVER, "--save", "", "--appendonly", "no", "--port", str(rport),
                       "--bind", HOST, "--dir", str(work)])
    ps.wait_tcp("redis", HOST, rport)
    redis_url = f"redis://{HOST}:{rport}/0"

    threads, conns, pconns = 2, 64, 16
    names = wrk.probe_host_names(threads, 4096)
    hosts_file = work / "probe-hosts"
    hosts_file.write_text("".join(f"{HOST} {n}\n" for n in names))
    cached_lua = wrk.write_script(work / "cached.lua", target_host=SITE, target_port=tport,
                                  fingerprint=target.sha1)
    probe_lua = wrk.write_script(work / "probe.lua", target_host=SITE, target_port=tport,
                                 fingerprint=target.wrong_sha1, distinct_hosts=4096)

    def start_notary(name: str, store: str, workers: int, metrics: bool) -> int:
        port = free_port()
        extra = ["--workers", str(workers), "--hosts-file", str(hosts_file),
                 "--negative-ttl", "0", "--max-connections", "0", "--rate-burst", "1",
                 "--probe-rate-limit", "0"]
        if store == "redis":
            extra += ["--redis", redis_url, "--redis-prefix", f"bench-{name}:"]
        if metrics:
            extra += ["--metrics-listen", f"{HOST}:{free_port()}"]
        ps.start(name, notary_argv(work / name, port, tls=False, rate_limit=0, extra=extra))
        ps.wait_http(name, HOST, port, timeout=60)
        return port

    Trial = Callable[[], dict[str, Any]]
    plans: dict[str, Trial] = {}

    def wrk_trial(port: int, script: Path, c: int, status: str, cache: str) -> Trial:
        def go() -> dict[str, Any]:
            r = wrk.run_wrk(f"http://{HOST}:{port}", script, threads=threads, connections=c,
                            seconds=seconds)
            d = r.as_dict()
            d["unexpected"] = unexpected(r, status, cache)
            return d
        return go

    ports: dict[str, int] = {}
    for name, store, workers, metrics in CACHED:
        port = start_notary(f"cached-{name}", store, workers, metrics)
        ports[name] = port
        size = warm(port, tport, target, tls=False)
        for _ in range(4 * workers):  # every worker's LRU (the kernel spreads connections)
            warm(port, tport, target, tls=False)
        plans[f"cached/{name}"] = wrk_trial(port, cached_lua, conns, "200", HIT)
    bport = free_port()
    ps.start("trivial", trivial_argv(bport, size))
    ps.wait_http("trivial", HOST, bport)
    plans["cached/trivial"] = wrk_trial(bport, cached_lua, conns, "200", HIT)
    for name, store, workers in FORCED:
        port = start_notary(f"forced-{name}", store, workers, False)
        plans[f"forced/{name}"] = wrk_trial(port, probe_lua, pconns, "409", MISS)

    for name, fn in plans.items():  # warm-up, not recorded
        _log(f"warm-up {name}")
        fn()
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in plans}
    for i in range(trials):
        order = list(plans.items())
        if i % 2:
            order.reverse()
        for name, fn in order:
            results[name].append(fn())
            _log(f"trial {i + 1}/{trials} {name}: {results[name][-1]['rate']:,.0f}/s")

    # locust against wrk, same cached scenario, same notary (SQLite, 1 worker)
    targets_csv = work / "targets.csv"
    targets_csv.write_text(f"host,port,fingerprint,role\n{SITE},{tport},{target.sha1},good\n")
    cert = work / "cached-sqlite-1w" / "notary.pem"
    locust_runs = []
    for _ in range(2):
        _log("locust run")
        locust_runs.append(run_locust(f"http://{HOST}:{ports['sqlite-1w']}", cert,
                                      targets_csv, work, max(5, seconds * 2), users=32))

    summary: dict[str, Any] = {}
    for name, trs in results.items():
        summary[name] = {
            "rate": _median([t["rate"] for t in trs]),
            "p50_ms": _median([t["p50_ms"] for t in trs]),
            "p99_ms": _median([t["p99_ms"] for t in trs]),
            "unexpected": sum(int(t["unexpected"]) for t in trs),
            "socket_errors": sum(int(t["socket_errors"]) for t in trs),
            "rates": [round(t["rate"], 1) for t in trs],
        }
    base = summary["cached/trivial"]["rate"] or 1.0
    ref_c = summary["cached/sqlite-1w"]["rate"] or 1.0
    ref_f = summary["forced/sqlite-1w"]["rate"] or 1.0
    for name, s in summary.items():
        s["ratio_to_trivial"] = round(s["rate"] / base, 3)
        ref = ref_f if name.startswith("forced/") else ref_c
        s["ratio_to_sqlite_1w"] = round(s["rate"] / ref, 3)
    locust_rate = _median([r["rate"] for r in locust_runs])
    return {
        "configs": summary,
        "locust_vs_wrk": {
            "scenario": "cached, SQLite, 1 worker, keep-alive",
            "locust": {"rate": locust_rate, "runs": locust_runs},
            "wrk": {"rate": summary["cached/sqlite-1w"]["rate"]},
            "ratio_locust_to_wrk": round(locust_rate / ref_c, 3),
        },
        "metrics_overhead": {
            "rate_on": summary["cached/sqlite-1w-metrics"]["rate"],
            "rate_off": ref_c,
            "ratio_on_to_off": round(summary["cached/sqlite-1w-metrics"]["rate"] / ref_c, 3),
        },
        "trials": results,
    }


def print_table(doc: dict[str, Any]) -> None:
    print(f"{'configuration':28} {'req/s':>9} {'x trivial':>9} {'x sqlite-1w':>11} "
          f"{'p99 ms':>7} {'unexp':>6}")
    for name, s in doc["configs"].items():
        print(f"{name:28} {s['rate']:9,.0f} {s['ratio_to_trivial']:9.2f} "
              f"{s['ratio_to_sqlite_1w']:11.2f} {s['p99_ms']:7.1f} {s['unexpected']:6d}")
    lw = doc["locust_vs_wrk"]
    print(f"locust vs wrk (cached, sqlite-1w): locust {lw['locust']['rate']:,.0f}/s, "
          f"wrk {lw['wrk']['rate']:,.0f}/s, ratio {lw['ratio_locust_to_wrk']:.2f}")
    mo = doc["metrics_overhead"]
    print(f"metrics on/off (cached, sqlite-1w): {mo['ratio_on_to_off']:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.scale.run")
    p.add_argument("--seconds", type=int, default=2)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="1 trial of 2 s (a smoke run)")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    seconds, trials = (2, 1) if a.quick else (a.seconds, a.trials)
    if not (1 <= seconds <= 30 and 1 <= trials <= 9):
        p.error("--seconds must be 1-30 and --trials 1-9")
    started = time.time()
    machine = machine_info()  # before the run: it records the load average then
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, Processes(
        Path(tmp) / "logs"
    ) as ps:
        doc = measure(ps, Path(tmp), seconds, trials)
    doc["meta"] = {"seconds_per_trial": seconds, "trials": trials,
                   "wall_seconds": round(time.time() - started, 1),
                   "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                   "machine": machine, "loadavg_after": _loadavg()}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print_table(doc)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

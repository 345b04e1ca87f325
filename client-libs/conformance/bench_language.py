"""One language's client benchmark beside the C library's, in the same run.

Starts one real ``notary serve`` on loopback, writes three configuration directories (a
cached one, a legacy one and an extended one without a cache), then runs

- the C library's benchmark (``client-libs/c/build/bench_converge``): the local-cache hit and
  the legacy round trip, the baseline;
- the language's benchmark command with the arguments
  ``CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FINGERPRINT N_CACHE N_ROUND_TRIPS``; it prints
  one JSON line per measurement, ``{"measurement": "cache hit" | "round trip, legacy" |
  "round trip, extended", "n", "p50_us", "p99_us", "mean_us"}``;

and writes ``bench-results.json`` (``client-libs/<language>/`` when ``CONVERGE_RECORD=1``,
else under ``var/results/``) with each figure, its ratio to C's, and the goal (a cache hit
p50 under 50 us).

    .venv/bin/python client-libs/conformance/bench_language.py LANGUAGE -- COMMAND...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
GOAL_CACHE_HIT_P50_US = 50.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_tls(port: int, timeout: float = 30.0) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s, \
                    ctx.wrap_socket(s) as t:
                t.sendall(b"GET / HTTP/1.0\r\n\r\n")
                if t.recv(10):
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: notary on port {port} did not answer")


def config_dir(root: Path, bundle: dict[str, Any], extended: bool, cache: bool) -> Path:
    d = root
    (d / "notaries-available").mkdir(parents=True)
    (d / "notaries-enabled").mkdir()
    b = dict(bundle)
    if not extended:
        b.pop("protocols", None)
        b.pop("signing_keys", None)
    (d / "notaries-available" / "a.notary").write_text(json.dumps(b))
    (d / "notaries-enabled" / "a.notary").symlink_to("../notaries-available/a.notary")
    settings: dict[str, Any] = {"notary-timeout": 10, "total-timeout": 20}
    if not cache:
        settings["db"] = None
    (d / "converge.config").write_text(json.dumps(settings))
    return d


def run_lines(cmd: list[str], timeout: float) -> list[dict[str, Any]]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {cmd[0]} failed (exit {proc.returncode})")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 usage="%(prog)s LANGUAGE [options] -- COMMAND...")
    ap.add_argument("language")
    ap.add_argument("--cache-iterations", type=int, default=20000)
    ap.add_argument("--round-trips", type=int, default=300)
    if "--" not in args:
        ap.error("the language's benchmark command is missing (after --)")
    cut = args.index("--")
    a = ap.parse_args(args[:cut])
    cmd = args[cut + 1:]
    record = os.environ.get("CONVERGE_RECORD") == "1"
    out = (ROOT / "client-libs" / a.language / "bench-results.json" if record else
           ROOT / "var" / "results" / "client-libs" / a.language / "bench-results.json")
    c_bench = ROOT / "client-libs" / "c" / "build" / "bench_converge"
    if not c_bench.exists():
        subprocess.run(["make", "-s", "-C", str(ROOT / "client-libs" / "c"),
                        "build/bench_converge"], check=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{a.language}-"))
    port = free_port()
    notary = None
    try:
        subprocess.run([str(BIN / "notary"), "keygen", "--data-dir", str(tmp / "n")], check=True,
                       capture_output=True)
        log = (tmp / "notary.log").open("w")
        notary = subprocess.Popen([str(BIN / "notary"), "serve", "--data-dir", str(tmp / "n"),
                                   "--listen", f"127.0.0.1:{port}", "--allow-target",
                                   "127.0.0.0/8"], stdout=log, stderr=subprocess.STDOUT)
        wait_tls(port)
        subprocess.run([str(BIN / "notary"), "bundle", "--data-dir", str(tmp / "n"), "--host",
                        "127.0.0.1", "--ssl-port", str(port), "--name", "Org Bench", "-o",
                        str(tmp / "bench.notary")], check=True, capture_output=True)
        bundle = json.loads((tmp / "bench.notary").read_text())
        fp = subprocess.run(["openssl", "x509", "-in", str(tmp / "n" / "notary.pem"), "-noout",
                             "-fingerprint", "-sha1"], check=True, capture_output=True,
                            text=True).stdout.strip().split("=", 1)[1]
        cached = config_dir(tmp / "cfg-cache", bundle, extended=False, cache=True)
        legacy = config_dir(tmp / "cfg-legacy", bundle, extended=False, cache=False)
        extended = config_dir(tmp / "cfg-extended", bundle, extended=True, cache=False)
        c_rows = run_lines([str(c_bench), "cache", str(a.cache_iterations)], 600)
        c_rows += run_lines([str(c_bench), "real", str(legacy), "127.0.0.1", str(port), fp,
                             str(a.round_trips)], 600)
        rows = run_lines([*cmd, str(cached), str(legacy), str(extended), "127.0.0.1", str(port),
                          fp, str(a.cache_iterations), str(a.round_trips)], 1200)
    finally:
        if notary is not None:
            notary.terminate()
            notary.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    c_cache = next(r for r in c_rows if r["measurement"].startswith("cache hit, converge_check"))
    c_rt = next(r for r in c_rows if r["measurement"].startswith("round trip, 1 real notary"))
    mine = {r["measurement"]: r for r in rows}
    hit = mine["cache hit"]
    doc = {
        "suite": f"client-{a.language}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "results": rows,
        "baseline_c": {"cache hit": c_cache, "round trip, legacy": c_rt},
        "ratios_p50_to_c": {
            "cache hit": round(hit["p50_us"] / c_cache["p50_us"], 2),
            "round trip, legacy": round(mine["round trip, legacy"]["p50_us"] / c_rt["p50_us"], 2),
        },
        "goal_cache_hit_p50_us": GOAL_CACHE_HIT_P50_US,
        "cache_hit_p50_under_goal": hit["p50_us"] < GOAL_CACHE_HIT_P50_US,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        print(f"{a.language}: {r['measurement']}: p50 {r['p50_us']:.1f} us, "
              f"p99 {r['p99_us']:.1f} us (n={r['n']})")
    met = "met" if doc["cache_hit_p50_under_goal"] else "NOT met"
    print(f"C (same run): cache hit p50 {c_cache['p50_us']:.1f} us, legacy round trip p50 "
          f"{c_rt['p50_us']:.1f} us; ratios {doc['ratios_p50_to_c']}; cache hit goal "
          f"< {GOAL_CACHE_HIT_P50_US:g} us: {met}")
    print(f"wrote {out}")
    return 0 if doc["cache_hit_p50_under_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""System calls per forced probe, with the transparency log and with ``--no-log``.

    python -m bench.notary.syscalls [--seconds 5]

One notary (1 worker, plain HTTP) under wrk's forced probes (16 connections, every request a
new name and a live probe), ``strace -c -f`` attached to it for the loaded seconds only.
The probe count is the notary's ``connect`` calls (one per probe). Needs ``strace`` (in
scripts/install-system-deps); without it the suite says so and exits 0. Results:
``bench/results/notary-syscalls.json`` when recording, else under ``var/results/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.notary import stime, wrk
from bench.notary.certs import make_rsa_cert
from bench.notary.procs import BenchError, Processes, free_port
from bench.notary.run import HOST, SITE, _loadavg, _now, notary_argv
from bench.paths import results_path


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c`` table -> {syscall: calls}."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            try:
                calls[parts[-1]] = int(parts[3])
            except ValueError:
                continue
    return calls


def measure(work: Path, extra: Sequence[str], seconds: int) -> dict[str, Any]:
    with Processes(work / "logs") as ps:
        target = make_rsa_cert(work / "target", SITE)
        tport = free_port()
        ps.start("s_server", stime.s_server_argv(target, HOST, tport))
        ps.wait_tcp("s_server", HOST, tport)
        names = wrk.probe_host_names(2, 4096)
        hosts = work / "hosts"
        hosts.write_text("".join(f"{HOST} {n}\n" for n in names))
        script = wrk.write_script(work / "probe.lua", target_host=SITE, target_port=tport,
                                  fingerprint=target.wrong_sha1, distinct_hosts=4096)
        port = free_port()
        proc = ps.start("notary", notary_argv(work / "notary", port, tls=False, rate_limit=1e9,
                                              extra=["--hosts-file", str(hosts),
                                                     "--negative-ttl", "0", *extra]))
        ps.wait_http("notary", HOST, port)
        url = f"http://{HOST}:{port}"
        wrk.run_wrk(url, script, threads=2, connections=16, seconds=1)  # warm-up
        out = work / "strace.txt"
        st = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(proc.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            r = wrk.run_wrk(url, script, threads=2, connections=16, seconds=seconds)
        finally:
            st.send_signal(signal.SIGINT)
            st.wait(30)
    calls = parse_strace_summary(out.read_text())
    probes = calls.get("connect", 0)
    if probes <= 0:
        raise BenchError("strace counted no connect calls: no probes were made")
    return {"requests": r.requests, "probes": probes,
            "per_probe": {k: round(v / probes, 2) for k, v in
                          sorted(calls.items(), key=lambda kv: -kv[1])},
            "total_per_probe": round(sum(calls.values()) / probes, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.notary.syscalls", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=5)
    args = p.parse_args(argv)
    if not 1 <= args.seconds <= 60:
        p.error("--seconds must be 1..60")
    if shutil.which("strace") is None:
        print("bench/notary/syscalls: skipped (strace not installed)")
        return 0
    doc: dict[str, Any] = {"benchmark": "notary-syscalls", "started_at": _now(),
                           "loadavg_before": _loadavg(), "seconds": args.seconds}
    try:
        with tempfile.TemporaryDirectory(prefix="converge-syscalls-") as tmp:
            for name, extra in (("log", ()), ("no_log", ("--no-log",))):
                doc[name] = measure(Path(tmp) / name, extra, args.seconds)
                print(f"{name}: {doc[name]['total_per_probe']} system calls per probe "
                      f"({doc[name]['probes']} probes); top: "
                      + ", ".join(f"{k} {v}" for k, v in
                                  list(doc[name]["per_probe"].items())[:6]))
    except BenchError as exc:
        print(f"bench/notary/syscalls: failed: {exc}", file=sys.stderr)
        return 1
    doc["loadavg_after"] = _loadavg()
    doc["finished_at"] = _now()
    dest = results_path("bench/results/notary-syscalls.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

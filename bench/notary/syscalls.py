"""System calls per forced probe, with the transparency log and with ``--no-log``.

    python -m bench.notary.syscalls [--seconds 5]

One notary (1 worker, plain HTTP) under wrk's forced probes (16 connections, every request a
new name and a live probe). First, untraced, the thread hand-offs: every thread's context
switches from ``/proc`` (voluntary: the thread blocked, waiting for another; involuntary:
the scheduler took the core), and every thread's CPU, per answered request. Then
``strace -c -f`` attached to it for as many loaded seconds (ptrace stops every system
call, so the switches are counted without it). The probe count is the notary's ``connect``
calls (one per probe). Needs ``strace`` (in
scripts/install-system-deps); without it the suite says so and exits 0. Results:
``bench/results/notary-syscalls.json`` when recording, else under ``var/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
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


def thread_counts(pid: int) -> dict[str, tuple[int, int, float]]:
    """Per thread of ``pid``: (voluntary switches, involuntary switches, CPU seconds)."""
    out: dict[str, tuple[int, int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        cpu = stat.rsplit(")", 1)[1].split()
        out[tid] = (int(fields["voluntary_ctxt_switches"]),
                    int(fields["nonvoluntary_ctxt_switches"]),
                    (int(cpu[11]) + int(cpu[12])) / tick)
    return out


def handoffs(before: dict[str, tuple[int, int, float]], after: dict[str, tuple[int, int, float]],
             requests: int) -> dict[str, Any]:
    """Context switches and CPU per request, all threads and the busiest ones apart."""
    if requests <= 0:
        raise BenchError("no requests were answered")
    per = []
    for tid, (vol, invol, cpu) in after.items():
        v0, i0, c0 = before.get(tid, (0, 0, 0.0))
        per.append((cpu - c0, vol - v0, invol - i0))
    per.sort(reverse=True)
    return {"voluntary_switches_per_request": round(sum(p[1] for p in per) / requests, 2),
            "involuntary_switches_per_request": round(sum(p[2] for p in per) / requests, 2),
            "cpu_us_per_request": round(sum(p[0] for p in per) / requests * 1e6),
            "threads_cpu_us_per_request": [round(p[0] / requests * 1e6) for p in per
                                           if p[0] > 0]}


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
        before = thread_counts(proc.pid)
        untraced = wrk.run_wrk(url, script, threads=2, connections=16, seconds=seconds)
        switches = handoffs(before, thread_counts(proc.pid), untraced.requests)
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
    return {"requests": r.requests, "probes": probes, "untraced": switches,
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
                u = doc[name]["untraced"]
                print(f"{name}: {doc[name]['total_per_probe']} system calls per probe "
                      f"({doc[name]['probes']} probes); top: "
                      + ", ".join(f"{k} {v}" for k, v in
                                  list(doc[name]["per_probe"].items())[:6])
                      + f"; untraced: {u['voluntary_switches_per_request']} voluntary and "
                      f"{u['involuntary_switches_per_request']} involuntary context switches,"
                      f" {u['cpu_us_per_request']} us CPU per request (threads: "
                      + ", ".join(map(str, u["threads_cpu_us_per_request"])) + ")")
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

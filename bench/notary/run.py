"""One full notary benchmark run: start everything, measure, write JSON and Markdown.

    python -m bench.notary.run [--seconds 3] [--trials 7] [--quick]

Scenarios (see docs/benchmarks.md, "Method"): cached validations over keep-alive, cached
validations with a new TLS connection per request, and forced live probes; each against a
baseline measured in the same run, trials interleaved, medians reported.

The transparency log's cost (issue goals: cached answers >= 0.97, forced probes >= 0.95 of
the rate without the log; a proof's wait for sequencing p99 <= 1.5 s): ``log_cached`` and
``log_probes`` pair a notary with the log (the default) against one with ``--no-log``;
``log_proof_wait`` pairs ``/v2/answer`` forced probes with and without
``"transparency": true`` on the same notary.

``--busy`` runs a CPU burner (a bounded busy loop, one process) beside everything: the
"busy machine" scenario. The load average is recorded before and after the run and around
every trial pair.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.notary import report, stime, wrk
from bench.notary.certs import CertFiles, make_rsa_cert
from bench.notary.floor import library_handshake_cpu_us, signature_cpu_us
from bench.notary.procs import BenchError, Processes, cpu_seconds, free_port, http_request
from bench.paths import boot_id, keep_sections, results_path

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
SITE = "site.test"
HIT = "converge-notary; hit"
MISS = "converge-notary; fwd=miss"


@dataclass(frozen=True)
class ProbeScenario:
    key: str
    title: str  # {conns}: the connection count
    workers: int = 1
    connections_factor: int = 1  # times Options.probe_connections
    extra: tuple[str, ...] = ()  # more notary options
    target: float | None = 0.80  # rate / the target's raw handshake rate


PROBE_SCENARIOS = (
    ProbeScenario("forced_probes", "Forced live probes (409 every time), 1 worker, "
                  "{conns} connections"),
    ProbeScenario("forced_probes_64", "Forced live probes, 1 worker, {conns} connections",
                  connections_factor=4),
    ProbeScenario("forced_probes_thread", "Forced live probes, 1 worker, SQLite through the "
                  "earlier one-thread executor (--sqlite-driver thread)",
                  extra=("--sqlite-driver", "thread"), target=None),
    ProbeScenario("forced_probes_both", "Forced live probes, 1 worker, --verifier both "
                  "(perspective and CA; the target's chain ends at --ca-roots)",
                  extra=("--verifier", "both"), target=None),
    ProbeScenario("forced_probes_2w", "Forced live probes (409 every time), 2 workers",
                  workers=2, target=0.70),
)


LOG_SCENARIOS = ("log_cached", "log_probes", "log_proof_wait")
LOG_GOALS = {"log_cached": 0.97, "log_probes": 0.95}
PROOF_WAIT_GOAL_MS = 1500.0
# One process spinning until its deadline: the other core's load in the busy scenario.
BURNER = ("import sys, time\nend = time.monotonic() + float(sys.argv[1])\n"
          "while time.monotonic() < end:\n    pass\n")


@dataclass(frozen=True)
class Options:
    seconds: int = 3
    trials: int = 7
    threads: int = 2
    connections: int = 64
    probe_connections: int = 16
    fetch_clients: int = 4
    distinct_hosts: int = 4096
    rate_limit: float = 1e9
    warmup: bool = True
    scenarios: tuple[str, ...] = (
        "cached_keepalive", "cached_tls_per_request", "cached_tls_full_handshake",
        "forced_probes", "forced_probes_64", "forced_probes_thread", "forced_probes_both",
        "forced_probes_2w", *LOG_SCENARIOS,
    )
    out_json: Path | None = results_path("bench/results/notary.json")  # var/ unless recording
    out_md: Path | None = results_path("docs/benchmarks.md")
    work_dir: Path | None = None
    busy: bool = False  # a CPU burner beside the run (the "busy machine" scenario)
    busy_limit: float = 1800.0  # the burner stops by itself after this many seconds
    proof_clients: int = 8  # concurrent /v2/answer clients in log_proof_wait


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def notary_argv(data_dir: Path, port: int, *, tls: bool, rate_limit: float, workers: int = 1,
                extra: Sequence[str] = ()) -> list[str]:
    argv = [
        _python(), "-m", "notary.cli", "serve",
        "--data-dir", str(data_dir),
        "--listen", f"{HOST}:{port}",
        "--allow-target", "127.0.0.0/8",
        "--resolve", f"{SITE}={HOST}",
        "--workers", str(workers),
        "--rate-limit", f"{rate_limit:g}",
        "--rate-burst", str(int(min(rate_limit, 2**31 - 1))),
    ]
    if not tls:
        argv.append("--no-tls")
    return argv + list(extra)


def trivial_argv(port: int, body_size: int, cert: tuple[Path, Path] | None = None) -> list[str]:
    argv = [_python(), "-m", "bench.notary.trivial", "--listen", f"{HOST}:{port}",
            "--body-size", str(body_size)]
    if cert is not None:
        argv += ["--cert", str(cert[0]), "--key", str(cert[1])]
    return argv


def warm(port: int, target_port: int, cert: CertFiles, *, tls: bool) -> int:
    """Put the target in the notary's cache; return the size of a cached answer's body."""
    path = f"/target/{SITE}+{target_port}"
    body = f"fingerprint={cert.sha1}".encode()
    status, _, _ = http_request(HOST, port, "POST", path, body=body, tls=tls, timeout=10)
    if status != 200:
        raise BenchError(f"warming the notary on port {port}: status {status}, expected 200")
    status, headers, data = http_request(HOST, port, "POST", path, body=body, tls=tls)
    if status != 200 or headers.get("Cache-Status") != HIT:
        raise BenchError(f"notary on port {port} did not answer from cache: {status} {headers}")
    return len(data)


def unexpected(result: wrk.WrkResult, status: str, cache: str) -> int:
    """Answers that are not the expected status with the expected Cache-Status."""
    good = min(result.statuses.get(status, 0), result.cache_status.get(cache, 0))
    return max(0, result.requests - good)


def probe_count(metrics_port: int) -> int | None:
    """Live probes done so far (``notary_probe_seconds_count``, all outcomes, summed over
    every series: the instance's one metrics endpoint labels each worker's), or None when
    the endpoint does not tell."""
    try:
        status, _, data = http_request(HOST, metrics_port, "GET", "/metrics", timeout=5)
    except OSError:
        return None
    if status != 200:
        return None
    total = 0.0
    found = False
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("notary_probe_seconds_count"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return int(total) if found else None


def _per_request(before: float | None, after: float | None, requests: int) -> float | None:
    if before is None or after is None or requests <= 0:
        return None
    return (after - before) / requests * 1e6


def machine_info() -> dict[str, Any]:
    def tool_version(argv: list[str]) -> str | None:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0].strip() if text else None

    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    libs: dict[str, str] = {}
    for lib in ("aiohttp", "uvloop", "cryptography"):
        with contextlib.suppress(PackageNotFoundError):
            libs[lib] = version(lib)
    return {
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu,
        "platform": platform.platform(),
        "kernel": platform.release(),
        "boot_id": boot_id(),
        "python": platform.python_version(),
        "wrk": _short(tool_version(["wrk", "-v"]), 2),
        "openssl": _short(tool_version(["openssl", "version"]), 2),
        "libraries": libs,
        "loadavg_before": _loadavg(),
    }


def _short(text: str | None, words: int) -> str | None:
    """The first ``words`` words of a tool's version line."""
    return None if text is None else " ".join(text.split()[:words])


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _log(msg: str) -> None:
    print(f"bench/notary: {msg}", flush=True)


def run(opts: Options) -> dict[str, Any]:
    """Measure every scenario in ``opts.scenarios``; return the results document."""
    started = _now()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="converge-bench-") as tmp:
        work = opts.work_dir or Path(tmp)
        with Processes(work / "logs") as ps:
            if opts.busy:
                ps.start("burner", [_python(), "-c", BURNER, f"{opts.busy_limit:g}"])
            scenarios = _measure(ps, work, opts)
    machine["loadavg_after"] = _loadavg()
    return {
        "schema": 1,
        "benchmark": "notary",
        "started_at": started,
        "finished_at": _now(),
        "commit": _commit(),
        "machine": machine,
        "settings": {
            "seconds": opts.seconds,
            "trials": opts.trials,
            "threads": opts.threads,
            "connections": opts.connections,
            "probe_connections": opts.probe_connections,
            "fetch_clients": opts.fetch_clients,
            "distinct_hosts": opts.distinct_hosts,
            "rate_limit": opts.rate_limit,
            "workers": "1 (forced_probes_2w: 2)",
            "probe_connections_64": opts.probe_connections * 4,
        },
        "busy_scenario": opts.busy,
        "study": report.STUDY,
        "scenarios": scenarios,
        "probe_goals": report.probe_goals(scenarios),
        "log_goals": log_goals(scenarios),
    }


def _measure(ps: Processes, work: Path, opts: Options) -> dict[str, Any]:
    want = set(opts.scenarios)
    target = make_rsa_cert(work / "target", SITE)
    tport = free_port()
    ps.start("s_server", stime.s_server_argv(target, HOST, tport))
    ps.wait_tcp("s_server", HOST, tport)

    Trial = Callable[[], dict[str, Any]]
    plans: dict[str, tuple[Trial, Trial]] = {}
    meta: dict[str, dict[str, Any]] = {}

    if want & {"cached_keepalive", "cached_tls_per_request", "log_cached"}:
        script_ka = wrk.write_script(work / "cached.lua", target_host=SITE, target_port=tport,
                                     fingerprint=target.sha1)
        script_close = wrk.write_script(work / "cached-close.lua", target_host=SITE,
                                        target_port=tport, fingerprint=target.sha1, close=True)

    def wrk_trial(server: str, port: int, script: Path, tls: bool, conns: int, status: str,
                  cache: str, also: str | None = None) -> Trial:
        """wrk against ``server``; also records the CPU time ``server`` (and ``also``) used."""
        url = f"{'https' if tls else 'http'}://{HOST}:{port}"
        pids = {"server": ps.pid(server)}
        if also is not None:
            pids["target"] = ps.pid(also)

        def go() -> dict[str, Any]:
            before = {k: cpu_seconds(p, with_children=True) for k, p in pids.items()}
            r = wrk.run_wrk(url, script, threads=opts.threads, connections=conns,
                            seconds=opts.seconds)
            after = {k: cpu_seconds(p, with_children=True) for k, p in pids.items()}
            d = r.as_dict()
            d["unexpected"] = unexpected(r, status, cache)
            for k in pids:
                d[f"{k}_cpu_us_per_request"] = _per_request(before[k], after[k], r.requests)
            return d

        return go

    def plain_notary(name: str, extra: Sequence[str] = ()) -> tuple[int, int]:
        """A plain-HTTP notary with the target in its cache: (port, cached body size)."""
        port = free_port()
        ps.start(name, notary_argv(work / name, port, tls=False, rate_limit=opts.rate_limit,
                                   extra=extra))
        ps.wait_http(name, HOST, port)
        return port, warm(port, tport, target, tls=False)

    if want & {"cached_keepalive", "log_cached"}:
        np, size = plain_notary("notary-plain")

    if "cached_keepalive" in want:
        bp = free_port()
        ps.start("trivial-plain", trivial_argv(bp, size))
        ps.wait_http("trivial-plain", HOST, bp)
        plans["cached_keepalive"] = (
            wrk_trial("notary-plain", np, script_ka, False, opts.connections, "200", HIT),
            wrk_trial("trivial-plain", bp, script_ka, False, opts.connections, "200", HIT),
        )
        meta["cached_keepalive"] = {
            "title": "Cached, keep-alive (HTTP)",
            "baseline_title": "trivial aiohttp+uvloop app",
            "target": 0.90, "body_bytes": size,  # issue 36
        }

    if "log_cached" in want:
        nlp, _ = plain_notary("notary-plain-nolog", ["--no-log"])
        plans["log_cached"] = (
            wrk_trial("notary-plain", np, script_ka, False, opts.connections, "200", HIT),
            wrk_trial("notary-plain-nolog", nlp, script_ka, False, opts.connections, "200",
                      HIT),
        )
        meta["log_cached"] = {
            "title": "Cached, keep-alive (HTTP), transparency log on",
            "baseline_title": "the same notary with --no-log",
            "target": LOG_GOALS["log_cached"], "body_bytes": size,
        }

    if want & {"cached_tls_per_request", "cached_tls_full_handshake"}:
        ntp = free_port()
        ntls_dir = work / "notary-tls"
        ps.start("notary-tls", notary_argv(ntls_dir, ntp, tls=True, rate_limit=opts.rate_limit))
        ps.wait_http("notary-tls", HOST, ntp, tls=True)
        tls_size = warm(ntp, tport, target, tls=True)
        get_path = f"/target/{SITE}+{tport}"
        status, headers, _ = http_request(HOST, ntp, "GET", get_path, tls=True)
        if status != 200 or headers.get("Cache-Status") != HIT:
            raise BenchError(f"GET {get_path} was not a cache hit: {status} {headers}")
        btp = free_port()
        ps.start("trivial-tls", trivial_argv(btp, tls_size, (ntls_dir / "notary.pem",
                                                             ntls_dir / "notary.key")))
        ps.wait_http("trivial-tls", HOST, btp, tls=True)

    if "cached_tls_per_request" in want:
        plans["cached_tls_per_request"] = (
            wrk_trial("notary-tls", ntp, script_close, True, opts.connections, "200", HIT),
            wrk_trial("trivial-tls", btp, script_close, True, opts.connections, "200", HIT),
        )
        meta["cached_tls_per_request"] = {
            "title": "Cached, new TLS connection per request (session resumed)",
            "baseline_title": "trivial app over TLS, same key",
            "target": None, "body_bytes": tls_size,
        }

    def fetch_trial(server: str, port: int, size: int) -> Trial:
        pid = ps.pid(server)

        def go() -> dict[str, Any]:
            before = cpu_seconds(pid)
            f = stime.s_time_fetch(HOST, port, get_path, opts.seconds, opts.fetch_clients)
            d = f.as_dict()
            d["requests"] = f.connections
            d["server_cpu_us_per_request"] = _per_request(before, cpu_seconds(pid),
                                                          f.connections)
            # s_time does not show statuses: every answer must at least hold the body
            d["unexpected"] = 0 if f.bytes_per_connection >= size else f.connections
            return d

        return go

    if "cached_tls_full_handshake" in want:
        plans["cached_tls_full_handshake"] = (
            fetch_trial("notary-tls", ntp, tls_size),
            fetch_trial("trivial-tls", btp, tls_size),
        )
        meta["cached_tls_full_handshake"] = {
            "title": "Cached, new TLS connection per request (full handshake, GET)",
            "baseline_title": "trivial app over TLS, same key",
            "target": None, "body_bytes": tls_size,
        }

    probe_plans = [p for p in PROBE_SCENARIOS if p.key in want]
    if probe_plans or "log_probes" in want:
        names = wrk.probe_host_names(opts.threads, opts.distinct_hosts)
        hosts_file = work / "probe-hosts"
        hosts_file.write_text("".join(f"{HOST} {n}\n" for n in names))
        script_probe = wrk.write_script(work / "probe.lua", target_host=SITE, target_port=tport,
                                        fingerprint=target.wrong_sha1,
                                        distinct_hosts=opts.distinct_hosts)
        target_pid = ps.pid("s_server")

        def stime_trial(key_file: Path) -> Trial:
            def go() -> dict[str, Any]:
                before = cpu_seconds(target_pid)
                h = stime.s_time(HOST, tport, opts.seconds)
                d = h.as_dict()
                d["target_cpu_us_per_request"] = _per_request(before, cpu_seconds(target_pid),
                                                              h.connections)
                d["client_cpu_us_per_handshake"] = (
                    None if h.client_cpu_seconds is None or not h.connections
                    else h.client_cpu_seconds / h.connections * 1e6)
                d["signature_cpu_us"] = signature_cpu_us(key_file)
                d["library_handshake_cpu_us"] = library_handshake_cpu_us(
                    HOST, tport, min(2.0, opts.seconds))
                return d

            return go

    for plan in probe_plans:
        name = f"notary-{plan.key.replace('_', '-')}"
        pp = free_port()
        metrics = free_port()
        ps.start(name, notary_argv(
            work / name, pp, tls=False, rate_limit=opts.rate_limit, workers=plan.workers,
            extra=["--hosts-file", str(hosts_file), "--negative-ttl", "0",
                   "--metrics-listen", f"{HOST}:{metrics}", *plan.extra,
                   *(["--ca-roots", str(target.root), "--ca-no-mozilla"]
                     if "--verifier" in plan.extra and target.root else [])],
        ))
        ps.wait_http(name, HOST, pp)
        ps.wait_http(name, HOST, metrics)
        conns = opts.probe_connections * plan.connections_factor
        probe_trial = wrk_trial(name, pp, script_probe, False, conns, "409", MISS,
                                also="s_server")

        def counted_probe_trial(trial: Trial = probe_trial,
                                port: int = metrics) -> dict[str, Any]:
            before = probe_count(port)
            d = trial()
            after = probe_count(port)
            d["probes_counted"] = None if before is None or after is None else after - before
            return d

        plans[plan.key] = (counted_probe_trial, stime_trial(work / name / "notary.key"))
        meta[plan.key] = {
            "title": plan.title.format(conns=conns),
            "baseline_title": "target's raw handshakes (openssl s_time -new)",
            "target": plan.target,
            "connections": conns,
        }

    def probe_notary(name: str, extra: Sequence[str] = (), workers: int = 1,
                     hosts: Path | None = None) -> tuple[int, int]:
        pp = free_port()
        metrics = free_port()
        ps.start(name, notary_argv(
            work / name, pp, tls=False, rate_limit=opts.rate_limit, workers=workers,
            extra=["--hosts-file", str(hosts or hosts_file), "--negative-ttl", "0",
                   "--metrics-listen", f"{HOST}:{metrics}", *extra],
        ))
        ps.wait_http(name, HOST, pp)
        ps.wait_http(name, HOST, metrics)
        return pp, metrics

    if "log_probes" in want:
        lp, _ = probe_notary("notary-log-probes")
        nlp2, _ = probe_notary("notary-nolog-probes", ["--no-log"])
        conns = opts.probe_connections
        plans["log_probes"] = (
            wrk_trial("notary-log-probes", lp, script_probe, False, conns, "409", MISS),
            wrk_trial("notary-nolog-probes", nlp2, script_probe, False, conns, "409", MISS),
        )
        meta["log_probes"] = {
            "title": f"Forced live probes, 1 worker, {conns} connections, transparency log on",
            "baseline_title": "the same notary with --no-log",
            "target": LOG_GOALS["log_probes"], "connections": conns,
        }

    if "log_proof_wait" in want:
        proof_hosts = work / "proof-hosts"
        proof_hosts.write_text("".join(f"{HOST} t{i}.site.test\n" for i in range(20000)))
        wp, _ = probe_notary("notary-proof", hosts=proof_hosts)
        fresh = iter(range(20000))
        fresh_lock = threading.Lock()

        def proof_trial(transparency: bool) -> Trial:
            def go() -> dict[str, Any]:
                return answer_trial(wp, tport, target.sha1, transparency, fresh, fresh_lock,
                                    seconds=max(opts.seconds, 3), clients=opts.proof_clients)

            return go

        plans["log_proof_wait"] = (proof_trial(True), proof_trial(False))
        meta["log_proof_wait"] = {
            "title": "/v2/answer forced probes asking for the log's proof "
                     "(\"transparency\": true), default --log-interval 1 s",
            "baseline_title": "the same requests without \"transparency\"",
            "target": None, "connections": opts.proof_clients,
        }

    # A short warm-up of every side (first connections, caches, page faults), not recorded.
    warmups = list(plans.items()) if opts.warmup else []
    for name, (subject, baseline) in warmups:
        _log(f"warm-up: {name}")
        subject()
        baseline()

    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        k: {"notary": [], "baseline": []} for k in plans
    }
    for i in range(opts.trials):
        for name, (subject, baseline) in plans.items():
            order = [("notary", subject), ("baseline", baseline)]
            if i % 2:
                order.reverse()
            load_before = _loadavg()
            for side, fn in order:
                results[name][side].append(fn())
            results[name]["notary"][-1]["loadavg_around"] = [load_before, _loadavg()]
            n, b = results[name]["notary"][-1], results[name]["baseline"][-1]
            _log(f"trial {i + 1}/{opts.trials} {name}: notary {n['rate']:,.0f}/s, "
                 f"baseline {b['rate']:,.0f}/s, ratio "
                 f"{n['rate'] / b['rate'] if b['rate'] else float('nan'):.2f}")

    out: dict[str, Any] = {}
    for name in plans:
        m = meta[name]
        n_trials, b_trials = results[name]["notary"], results[name]["baseline"]
        n_sum, b_sum = report.summarize(n_trials), report.summarize(b_trials)
        n_sum["unexpected"] = sum(int(t.get("unexpected", 0)) for t in n_trials)
        entry: dict[str, Any] = {
            "title": m["title"],
            "baseline_title": m["baseline_title"],
            "notary": n_sum,
            "baseline": b_sum,
            "compare": report.compare(n_trials, b_trials, m["target"]),
            "trials": {"notary": n_trials, "baseline": b_trials},
        }
        for k in ("body_bytes", "connections"):
            if k in m:
                entry[k] = m[k]
        if name == "cached_tls_per_request":
            entry["mean_ms_incl_handshake"] = {
                side: opts.connections / s["rate"] * 1000 if s.get("rate") else None
                for side, s in (("notary", n_sum), ("baseline", b_sum))
            }
        if name.startswith("forced_probes"):
            counted = [t.get("probes_counted") for t in n_trials]
            answered = sum(int(t["requests"]) for t in n_trials)
            ok = all(c is not None for c in counted)
            entry["verification"] = {
                "requests": answered,
                "probes_counted": sum(c for c in counted if c is not None) if ok else None,
                "fwd_miss": n_sum["cache_status"].get(MISS, 0),
                "note": "each answered request made its own probe" if ok and sum(
                    c for c in counted if c is not None) >= answered else
                "probe count unavailable or below the request count",
            }
        if name == "log_proof_wait":
            entry["proof_wait"] = proof_wait_figures(n_trials, b_trials)
        out[name] = entry
    return out


def answer_trial(port: int, target_port: int, sha1: str, transparency: bool,
                 fresh: Any, lock: threading.Lock, *, seconds: float,
                 clients: int) -> dict[str, Any]:
    """``clients`` threads sending ``/v2/answer`` for never-asked names (each a cache miss
    and a live probe) for ``seconds``; latencies of the 200 answers that match."""
    latencies: list[float] = []
    counts = {"requests": 0, "proofs": 0, "unexpected": 0}
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            with lock:
                i = next(fresh, None)
            if i is None:
                return
            doc: dict[str, Any] = {"host": f"t{i}.site.test", "port": target_port,
                                   "fingerprint": sha1}
            if transparency:
                doc["transparency"] = True
            t0 = time.perf_counter()
            try:
                status, _, data = http_request(HOST, port, "POST", "/v2/answer",
                                               body=json.dumps(doc).encode(), timeout=10,
                                               headers={"Content-Type": "application/json"})
            except OSError:
                status, data = 0, b""
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                counts["requests"] += 1
                if status != 200 or (transparency and b'"transparency":' not in data):
                    counts["unexpected"] += 1
                    continue
                counts["proofs"] += b'"transparency":' in data
                latencies.append(ms)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    wall = time.monotonic() - t0
    lat = sorted(latencies)
    return {
        "rate": len(lat) / wall if wall > 0 else 0.0,
        "p50_ms": _quantile(lat, 0.50), "p99_ms": _quantile(lat, 0.99),
        "mean_ms": sum(lat) / len(lat) if lat else None,
        "max_ms": lat[-1] if lat else None,
        "latencies_ms": [round(x, 2) for x in lat],
        **counts,
    }


def _quantile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def proof_wait_figures(with_proof: Sequence[dict[str, Any]],
                       without: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What waiting for sequencing adds, over every trial's answers pooled: the p99 of the
    answers with a proof minus the median of those without (the probe's own latency); also
    p99 minus p99."""
    w = sorted(x for t in with_proof for x in t.get("latencies_ms", []))
    o = sorted(x for t in without for x in t.get("latencies_ms", []))
    p99w, p50w, p99o, p50o = (_quantile(w, 0.99), _quantile(w, 0.5), _quantile(o, 0.99),
                              _quantile(o, 0.5))
    added = None if p99w is None or p50o is None else p99w - p50o
    return {
        "answers_with_proof": len(w), "answers_without": len(o),
        "proofs": sum(int(t.get("proofs", 0)) for t in with_proof),
        "p50_ms_with": p50w, "p99_ms_with": p99w, "p50_ms_without": p50o,
        "p99_ms_without": p99o,
        "added_p50_ms": None if p50w is None or p50o is None else p50w - p50o,
        "added_p99_ms": added,
        "added_p99_minus_p99_ms": None if p99w is None or p99o is None else p99w - p99o,
        "goal_ms": PROOF_WAIT_GOAL_MS,
        "met": None if added is None else added <= PROOF_WAIT_GOAL_MS,
    }


def log_goals(sc: dict[str, Any]) -> list[dict[str, Any]]:
    """The transparency log's performance goals from one run's scenarios."""
    out: list[dict[str, Any]] = []
    for key, limit in LOG_GOALS.items():
        if key in sc:
            c = sc[key]["compare"]
            out.append({"goal": f"{key}: rate with the log / --no-log", "value": c["ratio"],
                        "min": c["ratio_min"], "max": c["ratio_max"], "limit": limit,
                        "at_most": False, "unit": "x", "met": c["ratio"] >= limit})
    pw = (sc.get("log_proof_wait") or {}).get("proof_wait")
    if pw and pw.get("added_p99_ms") is not None:
        out.append({"goal": "log_proof_wait: p99 added by waiting for sequencing",
                    "value": pw["added_p99_ms"], "limit": PROOF_WAIT_GOAL_MS,
                    "at_most": True, "unit": "ms", "met": pw["met"]})
    return out


def write_outputs(doc: dict[str, Any], out_json: Path | None, out_md: Path | None) -> None:
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
        _log(f"wrote {out_json}")
    if out_md is not None:
        out_md.parent.mkdir(parents=True, exist_ok=True)
        out_md.write_text(keep_sections(out_md, report.render_markdown(doc)))
        _log(f"wrote {out_md}")


def print_summary(doc: dict[str, Any]) -> None:
    for name, row in doc["scenarios"].items():
        n, b, c = row["notary"], row["baseline"], row["compare"]
        tgt = "" if c["target"] is None else (
            f" (target {c['target']:.0%}: {'met' if c['meets_target'] else 'NOT met'})")
        lat = (f"p50 {n['p50_ms']:.2f} ms p99 {n['p99_ms']:.2f} ms" if "p50_ms" in n
               else f"mean {n.get('mean_ms', 0):.2f} ms")
        print(f"{name}: notary {n['rate']:,.0f}/s {lat} errors {report.error_count(n)}; "
              f"baseline {b['rate']:,.0f}/s; ratio {c['ratio']:.2f}{tgt}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.notary.run", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=Options.seconds, help="per trial and side")
    p.add_argument("--trials", type=int, default=Options.trials)
    p.add_argument("--connections", type=int, default=Options.connections)
    p.add_argument("--probe-connections", type=int, default=Options.probe_connections)
    p.add_argument("--scenario", action="append", choices=Options.scenarios,
                   help="run only this scenario (repeatable)")
    p.add_argument("--quick", action="store_true", help="1 s trials, 3 trials (a smoke run)")
    p.add_argument("--no-write", action="store_true", help="print only; keep results files")
    p.add_argument("--json", type=Path, default=Options.out_json, help="results file")
    p.add_argument("--markdown", type=Path, default=Options.out_md, help="table file")
    p.add_argument("--work-dir", type=Path, help="keep logs and scripts here")
    p.add_argument("--busy", action="store_true",
                   help="run a CPU burner beside the benchmark (the busy-machine scenario)")
    args = p.parse_args(argv)
    if not 1 <= args.seconds <= 60 or not 1 <= args.trials <= 50:
        p.error("--seconds must be 1..60 and --trials 1..50")
    opts = Options(
        seconds=1 if args.quick else args.seconds,
        trials=3 if args.quick else args.trials,
        connections=args.connections,
        probe_connections=args.probe_connections,
        scenarios=tuple(args.scenario) if args.scenario else Options.scenarios,
        out_json=None if args.no_write else args.json,
        out_md=None if args.no_write else args.markdown,
        work_dir=args.work_dir,
        busy=args.busy,
    )
    t0 = time.monotonic()
    try:
        doc = run(opts)
    except BenchError as exc:
        print(f"bench/notary: failed: {exc}", file=sys.stderr)
        return 1
    doc["elapsed_seconds"] = round(time.monotonic() - t0, 1)
    write_outputs(doc, opts.out_json, opts.out_md)
    print_summary(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Table 4 of the 2014 study over emulated paths: what one ``converge()`` costs the Python
client (client-libs/python) when it asks real notaries (``notary serve``) that are tens to
hundreds of milliseconds away, for a site the notaries have cached (notary hit) or must probe
(notary miss), with one notary, the study's continental set and a global set of eight.

Every notary sits behind its own toxiproxy proxy with its distance's RTT, and probes the site
through a second proxy of the same RTT (the site and the client are both in North America, as
the study's were): notary k resolves the site names to 127.0.0.(20+k), where its proxy to the
site listens. The client waits for every notary (``early_return`` off), as the study's did,
and speaks the legacy protocol (the study's) or the extended one (a notary miss then waits
for the transparency log to sequence the new observation: ``notary serve --log-proof-wait``).
The distances are a model (chosen here, not measured by the study); the TCP handshakes of
the client->notary and notary->site connections are not carried by toxiproxy and are added
to the measured time as one RTT each (the ``+ TCP`` column).

A compiled client beside it: the Go library through its conformance CLI
(``client-libs/go/bin/converge-conformance check --config-dir DIR HOST PORT FINGERPRINT``,
client-libs/conformance/CLIENT-CLI.md, built by client-libs/go/test.sh), the same settings
in its configuration directory. The CLI is one process per call and cannot leave its start
out, so each call's wall time has the median of ``info`` calls of the same binary (process
start, Go runtime, JSON output) subtracted; the figure says so. Without the built CLI its
rows are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import socketserver
import ssl
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from replay.errors import ReplayIOError
from replay.overhead.profiles import PathProfile
from replay.overhead.toxi import Toxiproxy, stop_process
from replay.services import bin_path, free_port

# RTTs (ms) from a North American client: the study's continental notaries (its Table 4's
# "Continental") and a global set of eight; a model, not the study's measurements
SETS: dict[str, tuple[int, ...]] = {
    "one notary": (45,),
    "continental (3)": (20, 45, 70),
    "global (8)": (20, 45, 70, 90, 140, 180, 250, 300),
}
STUDY = {"continental (3)": (743, 1508), "global (8)": (1006, 1790)}
ROOT = Path(__file__).resolve().parents[2]
GO_CLI = ROOT / "client-libs" / "go" / "bin" / "converge-conformance"
INFO_CALLS = 7  # info calls whose median is the Go CLI's process start


def _profile(rtt: int) -> PathProfile:
    return PathProfile(f"notary-{rtt}", rtt, 2, 10_000, 10_000, "Table 4 notary distance")


class _Site:
    """The validated site: a TLS server that completes handshakes and closes."""

    def __init__(self, chain: Path, key: Path) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(chain), str(key))

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(10)
                with contextlib.suppress(OSError), \
                        ctx.wrap_socket(self.request, server_side=True) as s:
                    s.recv(1)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_table4(out: Path, tp: Toxiproxy, chain: Path, key: Path, checks: int) -> dict[str, Any]:
    from converge import Client, Config, parse_bundle
    from converge.extended import Mode as ExtMode

    d = out / "table4"
    d.mkdir(parents=True, exist_ok=True)
    site = _Site(chain, key)
    der = ssl.PEM_cert_to_DER_cert(chain.read_text())
    sha1 = hashlib.sha1(der).hexdigest()
    site_port = free_port()
    notary = bin_path("notary")
    rtts = sorted({r for s in SETS.values() for r in s})
    procs: list[subprocess.Popen[bytes]] = []
    bundles: dict[int, Any] = {}
    bundle_files: dict[int, Path] = {}
    # fresh names for the misses: the Python and the Go client, two protocols, every set
    names = [f"m{i}.table4.test" for i in range(4 * len(SETS) * (checks + 2) + 2)]
    try:
        for k, rtt in enumerate(rtts):
            addr = f"127.0.0.{20 + k}"
            hosts = d / f"hosts-{rtt}"
            hosts.write_text("".join(f"{addr} {n}\n" for n in [*names, "site.table4.test"]))
            tp.call("POST", "/proxies", {"name": f"t4-site-{rtt}",
                                         "listen": f"{addr}:{site_port}",
                                         "upstream": f"127.0.0.1:{site.port}",
                                         "enabled": True})
            tp.shape(f"t4-site-{rtt}", _profile(rtt))
            port = free_port()
            data = d / f"notary-{rtt}"
            log = (d / f"notary-{rtt}.log").open("wb")
            procs.append(subprocess.Popen(
                [notary, "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
                 "--allow-target", "127.0.0.0/8", "--hosts-file", str(hosts),
                 "--rate-limit", "0", "--probe-rate-limit", "0"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
            front = tp.proxy(f"t4-notary-{rtt}", port)
            tp.shape(f"t4-notary-{rtt}", _profile(rtt))
            _wait_tls(port, procs[-1])
            b = d / f"notary-{rtt}.notary"
            subprocess.run([notary, "bundle", "--data-dir", str(data), "--host", "127.0.0.1",
                            "--ssl-port", str(front), "--name", f"notary {rtt} ms", "-o",
                            str(b)], check=True, timeout=60, capture_output=True)
            bundles[rtt] = parse_bundle(b.read_bytes())
            bundle_files[rtt] = b
        fresh = iter(names)
        go = _GoCli(d)
        results: dict[str, Any] = {}
        for label, set_rtts in SETS.items():
            slowest = max(set_rtts)
            results[label] = {"notary_rtts_ms": list(set_rtts)}
            modes: tuple[tuple[str, ExtMode], ...] = (("legacy", "off"), ("extended", "prefer"))
            for proto, mode in modes:
                client = Client(Config(directory=None, db=None, early_return=False,
                                       quorum=len(set_rtts), notary_timeout=10.0,
                                       total_timeout=20.0, extended=mode,
                                       bundles=tuple(bundles[r] for r in set_rtts)))

                def check(host: str, c: Any = client) -> float:
                    t0 = time.perf_counter()
                    v = c.check(host, site_port, sha1)
                    if not v.trusted:
                        raise ReplayIOError(f"Table 4: {host} not trusted: {v}")
                    return (time.perf_counter() - t0) * 1000

                check("site.table4.test")  # the notaries' caches now hold the site
                hits = [check("site.table4.test") for _ in range(checks)]
                misses = [check(next(fresh)) for _ in range(checks)]
                results[label][proto] = {
                    "n": checks, "hit_ms": statistics.median(hits),
                    "miss_ms": statistics.median(misses),
                    "hit_plus_tcp_ms": statistics.median(hits) + slowest,
                    "miss_plus_tcp_ms": statistics.median(misses) + 2 * slowest,
                    "hit_samples_ms": hits, "miss_samples_ms": misses}
            results[label]["go"] = go.measure(label, [bundle_files[r] for r in set_rtts],
                                              site_port, sha1, checks, fresh, slowest)
        return results
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReplayIOError(f"Table 4: {exc}") from exc
    finally:
        for p in procs:
            stop_process(p)
        site.close()


class _GoCli:
    """The Go client's conformance CLI, timed per call with its process start subtracted."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.skipped = ""
        self.start_ms = 0.0
        if not (GO_CLI.is_file() and os.access(GO_CLI, os.X_OK)):
            self.skipped = (f"the Go conformance CLI is not built ({GO_CLI.relative_to(ROOT)}; "
                            "client-libs/go/test.sh builds it)")
            return
        times = []
        for _ in range(INFO_CALLS):
            t0 = time.perf_counter()
            r = subprocess.run([str(GO_CLI), "info"], capture_output=True, timeout=60)
            times.append((time.perf_counter() - t0) * 1000)
            if r.returncode != 0:
                self.skipped = f"{GO_CLI.name} info failed (exit {r.returncode})"
                return
        self.start_ms = statistics.median(times)

    def _config(self, label: str, proto: str, bundles: list[Path], quorum: int) -> Path:
        d = self.d / f"go-{label.split()[0]}-{proto}"
        (d / "notaries-available").mkdir(parents=True, exist_ok=True)
        (d / "notaries-enabled").mkdir(exist_ok=True)
        for i, b in enumerate(bundles):
            name = f"{i:02d}-{b.name}"
            (d / "notaries-available" / name).write_bytes(b.read_bytes())
            link = d / "notaries-enabled" / name
            if not link.is_symlink():
                link.symlink_to(Path("..") / "notaries-available" / name)
        # the Python client's settings: no local cache, wait for every notary
        (d / "converge.config").write_text(json.dumps({
            "db": None, "early-return": False, "quorum": quorum, "notary-timeout": 10,
            "total-timeout": 20, "extended": "off" if proto == "legacy" else "prefer"}))
        return d

    def measure(self, label: str, bundles: list[Path], port: int, sha1: str, checks: int,
                fresh: Any, slowest: int) -> dict[str, Any]:
        if self.skipped:
            return {"skipped": self.skipped}
        out: dict[str, Any] = {"process_start_ms": self.start_ms, "info_calls": INFO_CALLS}
        for proto in ("legacy", "extended"):
            cfg = self._config(label, proto, bundles, len(bundles))

            def check(host: str, cfg: Path = cfg) -> float:
                t0 = time.perf_counter()
                r = subprocess.run([str(GO_CLI), "check", "--config-dir", str(cfg), host,
                                    str(port), sha1], capture_output=True, text=True,
                                   timeout=60)
                ms = (time.perf_counter() - t0) * 1000
                if r.returncode != 0:
                    raise ReplayIOError(f"Table 4, Go client: {host} not trusted (exit "
                                        f"{r.returncode}): {r.stdout.strip()[:200]}")
                return ms - self.start_ms

            check("site.table4.test")
            hits = [check("site.table4.test") for _ in range(checks)]
            misses = [check(next(fresh)) for _ in range(checks)]
            out[proto] = {"n": checks, "hit_ms": statistics.median(hits),
                          "miss_ms": statistics.median(misses),
                          "hit_plus_tcp_ms": statistics.median(hits) + slowest,
                          "miss_plus_tcp_ms": statistics.median(misses) + 2 * slowest,
                          "hit_samples_ms": hits, "miss_samples_ms": misses}
        return out


def _wait_tls(port: int, proc: subprocess.Popen[bytes]) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReplayIOError(f"a notary exited ({proc.returncode}) at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                    ctx.wrap_socket(raw):
                return
        except OSError:
            time.sleep(0.2)
    raise ReplayIOError("a notary did not start within 60 s")

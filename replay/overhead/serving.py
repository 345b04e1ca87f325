"""The page under test, served: its server process (replay/overhead/server.py) on free
loopback ports with a certificate for every host, one toxiproxy proxy per scheme and host,
and the paired https - http statistics. Shared by ``replay overhead``'s own client runs
(experiment.py) and a real browser's (browser.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.errors import ReplayIOError
from replay.overhead.pages import Page, save
from replay.overhead.toxi import Toxiproxy, stop_process
from replay.overhead.udppath import free_udp_port, udp_port_free
from replay.services import free_port


def _pki(out: Path, page: Page) -> tuple[Path, Path, Path]:
    from replay.pki import key_pem, make_ca, make_leaf, new_key, pem

    now = dt.datetime.now(dt.UTC)
    ca = make_ca("converge overhead test root", "converge replay", now)
    key = new_key()
    leaf = make_leaf(page.hosts, ca, key, now - dt.timedelta(days=1))
    paths = out / "ca.pem", out / "chain.pem", out / "key.pem"
    paths[0].write_bytes(ca.pem)
    paths[1].write_bytes(pem(leaf))
    paths[2].write_bytes(key_pem(key))
    return paths


@dataclass(frozen=True)
class Served:
    upstreams: dict[str, int]  # scheme ("http", "https", "h2") -> the server's TCP port
    cafile: Path
    chain: Path
    key: Path
    h3_port: int = 0  # the HTTP/3 server's UDP port (0: none)


@contextlib.contextmanager
def serve_page(out: Path, page: Page, h2: bool, options: tuple[str, ...] = (),
               h3: bool = False) -> Iterator[Served]:
    """The page server (replay/overhead/server.py) for ``page`` on free loopback ports, with
    its certificate for every host of the page under ``out``; stopped on exit. ``options``:
    more of the server's command-line options (e.g. ``--tls13-tickets 0``)."""
    save(page, out / "page.json")
    cafile, chain, key = _pki(out, page)
    ups = {"http": free_port(), "https": free_port()}
    if h2:
        ups["h2"] = free_port()
    h3_port = free_udp_port() if h3 else 0
    log = (out / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "replay.overhead.server", "--page", str(out / "page.json"),
         "--cert", str(chain), "--key", str(key), "--http-port", str(ups["http"]),
         "--https-port", str(ups["https"]), "--h2-port", str(ups.get("h2", 0)),
         "--h3-port", str(h3_port), "--seconds", "3600", *options],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (all(_tcp_ready(p) for p in ups.values())
                   and (not h3_port or not udp_port_free(h3_port))):
            if server.poll() is not None or time.monotonic() > deadline:
                raise ReplayIOError(f"the page server did not start (see "
                                    f"{out / 'server.log'})")
            time.sleep(0.1)
        yield Served(ups, cafile, chain, key, h3_port)
    finally:
        stop_process(server)
        log.close()


def paths(tp: Toxiproxy, page: Page,
          upstreams: dict[str, int]) -> tuple[dict[tuple[str, str], int], list[str]]:
    """One toxiproxy proxy per (scheme, host of the page): their ports and names."""
    ports: dict[tuple[str, str], int] = {}
    names = []
    for scheme, upstream in upstreams.items():
        for h in page.hosts:
            name = f"{scheme}-{h}"
            ports[(scheme, h)] = tp.proxy(name, upstream)
            names.append(name)
    return ports, names


def _tcp_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False



def stats(http: list[float], https: list[float]) -> dict[str, Any]:
    """Paired https - http in ms and % of http: median, mean, 75th and 90th percentiles."""
    d = [(s - h) * 1000 for h, s in zip(http, https, strict=True)]
    pc = [(s - h) / h * 100 for h, s in zip(http, https, strict=True)]

    def q(xs: list[float], p: float) -> float:
        ys = sorted(xs)
        return ys[min(len(ys) - 1, max(0, math.ceil(p * len(ys)) - 1))]

    mh, ms = statistics.fmean(http), statistics.fmean(https)
    return {"n": len(d), "http_mean_s": mh, "https_mean_s": ms,
            "median_ms": statistics.median(d), "mean_ms": statistics.fmean(d),
            "p75_ms": q(d, 0.75), "p90_ms": q(d, 0.9),
            "median_pct": statistics.median(pc), "mean_pct": statistics.fmean(pc),
            "pct_of_means": (ms - mh) / mh * 100,
            "http_s": http, "https_s": https}


"""Where the page loads' time above the handshake model comes from (TLS 1.3's looked largest
beside its one-round-trip model): two measurements over a 90 ms path without jitter, on the
page server and client of ``replay overhead``.

1. One connection at a time, its time split: connect + TLS handshake, then the GET; servers
   sending OpenSSL's two TLS 1.3 session tickets after the handshake and none, interleaved.
   If the tickets (or Nagle / delayed ACKs through toxiproxy, or the client's read pattern)
   cost time, the GET after a TLS 1.3 handshake is slower than over http or TLS 1.2.
2. k connections at once (k = 1, 6, 18: one host's six, and three hosts' six as in the quick
   page's waves), each connect + handshake + GET: the time until the last is done; full and
   resumed (``+resume``: the session of an earlier connection offered) handshakes.

Run as ``python -m replay.overhead.excess [--repeats N] [--out DIR]``; prints both tables
and writes ``excess.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from replay.overhead.client import Browser, Mode
from replay.overhead.pages import PageShape, make_page
from replay.overhead.profiles import PathProfile
from replay.overhead.serving import paths, serve_page
from replay.overhead.toxi import Toxiproxy, find_toxiproxy
from replay.services import free_port

PATH = PathProfile("excess-90", 90, 0, 5000, 1000, "the thesis profile without its jitter")
PAGE = PageShape(objects=1, hosts=0, html_bytes=2000, median_bytes=1000, sigma=0.1,
                 cap_bytes=2000, redirects=0)
MODES = (Mode("http", False), Mode("https", False, "1.2"), Mode("https", False, "1.3"),
         Mode("https", False, "1.2", resume=True), Mode("https", False, "1.3", resume=True))


def _exchange(b: Browser, m: Mode, host: str) -> tuple[float, float]:
    """(connect + handshake, GET) in ms on a new connection."""
    t0 = time.perf_counter()
    c = b.connect(m, host)
    t1 = time.perf_counter()
    b.fetch(c, m, host, "/")
    t2 = time.perf_counter()
    c.close()
    return (t1 - t0) * 1000, (t2 - t1) * 1000


def measure(out: Path, repeats: int) -> dict[str, Any]:
    page = make_page(PAGE, 1)
    doc: dict[str, Any] = {"path": PATH.describe(), "repeats": repeats,
                           "load_start": os.getloadavg()}
    with contextlib.ExitStack() as st:
        browsers: dict[str, Browser] = {}
        for tickets in ("2", "0"):
            d = out / f"tickets-{tickets}"
            d.mkdir(parents=True, exist_ok=True)
            sv = st.enter_context(serve_page(d, page, False, ("--tls13-tickets", tickets)))
            tp = st.enter_context(Toxiproxy(find_toxiproxy(), free_port(), d / "toxi.log"))
            ports, names = paths(tp, page, sv.upstreams)
            for n in names:
                tp.shape(n, PATH)
            # the TCP handshake's round trip is left out: the split is of data round trips
            browsers[tickets] = Browser(ports, PATH, str(sv.cafile), 1, handshake_rtt=False)
        split: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for i in range(repeats + 1):
            for tickets, b in browsers.items():
                for m in MODES:
                    x = _exchange(b, m, page.host)
                    if i:
                        split.setdefault((tickets, m.label), []).append(x)
        doc["sequential"] = {
            f"tickets={t} {label}": {
                "handshake_ms": statistics.median(x[0] for x in xs),
                "get_ms": statistics.median(x[1] for x in xs),
                "model": {"http": "0 + 1 RTT", "tls1.2": "2 + 1 RTT"}.get(label,
                                                                          "1 + 1 RTT")}
            for (t, label), xs in split.items()}
        b = browsers["2"]
        par: dict[tuple[str, int], list[float]] = {}
        for i in range(repeats + 1):
            for k in (1, 6, 18):
                for m in MODES:
                    ts = [threading.Thread(target=_exchange, args=(b, m, page.host))
                          for _ in range(k)]
                    t0 = time.perf_counter()
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join(60)
                    if i:
                        par.setdefault((m.label, k), []).append(
                            (time.perf_counter() - t0) * 1000)
        doc["concurrent"] = {
            f"{label} k={k}": {
                "last_done_ms": statistics.median(xs),
                "above_k1_ms": statistics.median(xs) - statistics.median(par[(label, 1)])}
            for (label, k), xs in par.items()}
    doc["load_end"] = os.getloadavg()
    return doc


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m replay.overhead.excess")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="overhead-excess-"))
    doc = measure(out, max(1, min(a.repeats, 200)))
    for k, v in doc["sequential"].items():
        print(f"{k:18} handshake {v['handshake_ms']:4.0f} ms, GET {v['get_ms']:4.0f} ms "
              f"({v['model']})")
    for k, v in doc["concurrent"].items():
        print(f"{k:12} last done {v['last_done_ms']:4.0f} ms, +{v['above_k1_ms']:.0f} ms "
              "above one connection")
    print(f"load average {doc['load_start'][0]:.1f} -> {doc['load_end'][0]:.1f}")
    (out / "excess.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written: {out / 'excess.json'}")


if __name__ == "__main__":
    main()

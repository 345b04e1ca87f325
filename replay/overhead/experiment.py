"""``replay overhead``: the thesis's https-minus-http page download time, measured on real
TLS stacks over emulated paths (toxiproxy between the browser and the page's servers; for
HTTP/3, our UDP path emulator, udppath.py, with the same profile).

For each path profile and connection mode (non-persistent, persistent), ``repeats`` rounds;
each round loads the page once over http and once per TLS variant, in a shuffled order, and
every https time is paired with the round's http time (overhead = https - http, in ms and in
% of http). One unmeasured warm-up round precedes them: http and the ``+resume`` variants,
whose session caches it fills, as a returning visitor's browser has them.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from replay.errors import ReplayInputError, ReplayIOError
from replay.overhead.client import PARALLEL, Browser, Mode
from replay.overhead.pages import FULL, MAX_REDIRECTS, QUICK, Page, make_page, object_size
from replay.overhead.profiles import PathProfile
from replay.overhead.serving import paths, serve_page, stats
from replay.overhead.toxi import Toxiproxy, find_toxiproxy, port_free
from replay.overhead.udppath import UdpPath, free_udp_port
from replay.services import free_port

VARIANTS = (("1.2", False), ("1.2", True), ("1.3", False), ("1.3", True))
ROUNDS_PER_HANDSHAKE = {("1.2", False): 2, ("1.2", True): 1, ("1.3", False): 1,
                        ("1.3", True): 1}  # extra round trips of a TLS connection set-up


@dataclass(frozen=True)
class OverheadConfig:
    out: Path
    profiles: tuple[PathProfile, ...]
    quick: bool = True
    repeats: int = 0  # 0: 3 quick, 15 full
    seed: int = 1
    api_port: int = 0  # toxiproxy's API port; 0: a free one
    table4: bool = False  # also the study's Table 4 over notary paths (replay/overhead/table4.py)
    redirects: int = -1  # redirect hops before the page; -1: the page shape's (1)
    browser: bool = False  # also a real Firefox's loads (replay/overhead/browser.py)

    @property
    def rounds(self) -> int:
        return self.repeats or (3 if self.quick else 15)

    def validate(self) -> None:
        if not 0 <= self.repeats <= 1000:
            raise ReplayInputError("--repeats must be in [0, 1000]")
        if not -1 <= self.redirects <= MAX_REDIRECTS:
            raise ReplayInputError(f"--redirects must be in [0, {MAX_REDIRECTS}]")
        if not 0 <= self.api_port <= 65535:
            raise ReplayInputError("--api-port must be in [0, 65535]")
        if self.api_port and not port_free(self.api_port):
            raise ReplayInputError(f"port {self.api_port} on 127.0.0.1 is in use (--api-port)")


def _waves(page: Page) -> int:
    """Sequential connection set-ups on a non-persistent load's critical path: one per
    redirect hop, the page's, then ceil(objects per host / 6) on the busiest host."""
    per: dict[str, int] = {}
    for h, _ in page.objects:
        per[h] = per.get(h, 0) + 1
    return len(page.redirects) + 1 + max(math.ceil(n / 6) for n in per.values())


def _persistent_waves(page: Page) -> int:
    """The same for a persistent load: one per redirect hop, the page's, then one wave to
    the other hosts (if any)."""
    others = any(h != page.host for h, _ in page.objects)
    return len(page.redirects) + 1 + int(others)


# QUIC (aioquic): the congestion window starts at 10 datagrams of 1,200 bytes and doubles
# every round trip without loss (slow start); before the client's address is validated (its
# handshake done) a server sends at most 3 times what it received, the 1,200-byte padded
# Initial: about 3,000 bytes besides a resumed handshake's (RFC 9000 section 8.1)
QUIC_WINDOW = 10 * 1200
QUIC_EARLY_BUDGET = 3 * 1200 - 600


def slow_start_rounds(nbytes: int, window: int = QUIC_WINDOW) -> tuple[int, int]:
    """Round trips to deliver ``nbytes`` from a window of ``window`` bytes doubling each
    round trip; and the window after them."""
    rounds, sent = 0, 0
    while sent < nbytes or not rounds:
        sent += window
        window *= 2
        rounds += 1
    return rounds, window


def _by_host(page: Page) -> dict[str, tuple[int, int]]:
    """host -> (objects, bytes) of the page's objects."""
    out: dict[str, tuple[int, int]] = {}
    for h, p in page.objects:
        n, b = out.get(h, (0, 0))
        out[h] = n + 1, b + object_size(p)
    return out


def http_persistent_rtts(page: Page) -> int:
    """Round trips of a persistent HTTP/1.1 load over http, the bandwidth left out (the TCP
    paths have no slow start: toxiproxy ends TCP on loopback): per redirect hop TCP and the
    GET; the page's TCP and GET; then per host ceil(objects / 6) GETs in a row on six
    connections, after a TCP handshake (on the page's host too unless its one object goes on
    the page's connection)."""
    hosts = _by_host(page)
    waves = max((int(h != page.host or n > 1) + math.ceil(n / PARALLEL)
                 for h, (n, _) in hosts.items()), default=0)
    return 2 * len(page.redirects) + 2 + waves


def h3_rtts(page: Page, zero_rtt: bool) -> int:
    """Round trips of the HTTP/3 load, the bandwidth left out: per redirect hop the QUIC
    handshake and the GET; the page's handshake and its HTML in slow start; then the objects,
    all requested at once on one connection per host: on the page's connection in its grown
    window, on the others after their handshake from the initial window. 0-RTT: a connection
    whose first response fits the server's budget before address validation (the redirects'
    301s, a small HTML) has it one round trip earlier; a larger one waits for the handshake
    as without a ticket."""
    rounds, window = slow_start_rounds(page.html_bytes)
    hosts = _by_host(page)
    objects = max((slow_start_rounds(b, window)[0] if h == page.host
                   else 1 + slow_start_rounds(b)[0] for h, (_, b) in hosts.items()),
                  default=0)
    total = 2 * len(page.redirects) + 1 + rounds + objects
    if zero_rtt:
        total -= len(page.redirects) + int(page.html_bytes <= QUIC_EARLY_BUDGET)
    return total


def _measure(browser: Browser, page: Page, profile: PathProfile, persistent: bool,
             variants: tuple[tuple[str, bool], ...], rounds: int, rng: random.Random,
             progress: Any, h2: bool, h3: bool = False) -> dict[str, Any]:
    modes = [Mode("http", persistent)] + [Mode("https", persistent, v, r) for v, r in variants]
    if persistent and h2:
        modes.append(Mode("https", True, "1.3", h2=True))
    if persistent and h3:
        modes += [Mode("https", True, "1.3", h3=True), Mode("https", True, "1.3", True, h3=True)]
    times: dict[str, list[float]] = {m.label: [] for m in modes}
    retries: dict[str, int] = {}
    for i in range(rounds + 1):
        # the warm-up round loads what needs it: the +resume variants (their session caches)
        # and http (the server's first requests); the rest start cold as a first visit does
        order = [m for m in modes if i or m.resume or m.scheme == "http"]
        rng.shuffle(order)
        for m in order:
            try:
                t = browser.load(page, m)
            except ReplayIOError:  # one retry: a connection the shared machine dropped
                retries[m.label] = retries.get(m.label, 0) + 1
                t = browser.load(page, m)
            if i:  # round 0 warms up
                times[m.label].append(t)
        progress()
    out: dict[str, Any] = {"_retried_loads": retries} if retries else {}
    if persistent and h2:
        s = stats(times["http"], times["h2+tls1.3"])
        # TLS 1.3: one round trip per redirect hop, one on the page's connection, one on the
        # other hosts'; and no
        # six-connection limit (every request of a host at once, against HTTP/1.1's waves)
        s["model_round_trips"] = _persistent_waves(page)
        s["model_ms"] = s["model_round_trips"] * profile.rtt_ms
        s["overhead_round_trips"] = s["mean_ms"] / profile.rtt_ms if profile.rtt_ms else None
        out["h2+tls1.3"] = s
    if persistent and h3:
        for label, zero in (("h3", False), ("h3+0rtt", True)):
            s = stats(times["http"], times[label])
            # QUIC's handshake is one round trip, as the http load's TCP handshake; beyond
            # http: QUIC's slow start (the TCP paths have none), less the GET waves that
            # multiplexing saves, less what 0-RTT saves
            s["model_round_trips"] = h3_rtts(page, zero) - http_persistent_rtts(page)
            s["model_handshake_round_trips"] = (0 if not zero else
                                                h3_rtts(page, True) - h3_rtts(page, False))
            s["model_ms"] = s["model_round_trips"] * profile.rtt_ms
            s["overhead_round_trips"] = s["mean_ms"] / profile.rtt_ms if profile.rtt_ms \
                else None
            out[label] = s
    for v, r in variants:
        label = Mode("https", persistent, v, r).label
        s = stats(times["http"], times[label])
        handshakes = _persistent_waves(page) if persistent else _waves(page)
        s["model_ms"] = handshakes * ROUNDS_PER_HANDSHAKE[(v, r)] * profile.rtt_ms
        s["model_round_trips"] = handshakes * ROUNDS_PER_HANDSHAKE[(v, r)]
        s["overhead_round_trips"] = s["mean_ms"] / profile.rtt_ms if profile.rtt_ms else None
        out[label] = s
    return out


def h3_profiles(cfg: OverheadConfig) -> set[str]:
    """The profiles with HTTP/3 rows: every one, but with ``--quick`` only ``thesis`` (or the
    first given): an HTTP/3 load costs ~0.2 s of CPU here (aioquic, the relay: Python)."""
    if not cfg.quick:
        return {p.name for p in cfg.profiles}
    names = [p.name for p in cfg.profiles]
    return {"thesis" if "thesis" in names else names[0]}


def run_overhead(cfg: OverheadConfig) -> dict[str, Any]:
    """Measure; write ``overhead.json`` and ``overhead.md`` under ``cfg.out``; the document."""
    from replay.overhead.report import write_report

    cfg.validate()
    exe = find_toxiproxy()
    try:
        cfg.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplayIOError(f"cannot create {cfg.out}: {exc}") from exc
    shape = QUICK if cfg.quick else FULL
    if cfg.redirects >= 0:
        shape = replace(shape, redirects=cfg.redirects)
    page = make_page(shape, cfg.seed)
    firefox = None
    if cfg.browser:  # first: a missing Firefox is an error before the long part
        from replay.overhead.browser import run_browser_subset

        thesis = [p for p in cfg.profiles if p.name == "thesis"] or list(cfg.profiles[:1])
        firefox = run_browser_subset(cfg.out / "browser", thesis, cfg.rounds, cfg.seed,
                                     page=page)
    variants = VARIANTS
    api_port = cfg.api_port or free_port()
    from replay.overhead.client_h2 import available

    h2 = available()
    from replay.overhead.client_h3 import available as h3_available

    h3 = h3_available()
    t_start = time.monotonic()
    results: dict[str, Any] = {}
    connections: dict[str, Any] = {}
    table4: dict[str, Any] | None = None
    with serve_page(cfg.out, page, h2, h3=h3) as served, \
            Toxiproxy(exe, api_port, cfg.out / "toxiproxy.log") as tp:
        ports, names = paths(tp, page, served.upstreams)
        total = len(cfg.profiles) * 2 * (cfg.rounds + 1)
        done = [0]

        def progress() -> None:
            done[0] += 1
            el = time.monotonic() - t_start
            sys.stderr.write(f"\roverhead: {done[0]}/{total} rounds, {el:.0f} s")
            sys.stderr.flush()

        rng = random.Random(cfg.seed)
        udp = {h: free_udp_port() for h in page.hosts} if h3 else {}
        h3_on = h3_profiles(cfg) if h3 else set()
        for profile in cfg.profiles:
            h3_here = profile.name in h3_on
            for n in names:
                tp.shape(n, profile)
            browser = Browser({**ports, **{("h3", h): p for h, p in udp.items()}}, profile,
                              str(served.cafile), cfg.seed)
            with contextlib.ExitStack() as stack:
                path = stack.enter_context(UdpPath(
                    profile, {p: served.h3_port for p in udp.values()},
                    cfg.out / f"udppath-{profile.name}.log", cfg.seed)) if h3_here else None
                results[profile.name] = {
                    conn: _measure(browser, page, profile, conn == "persistent", variants,
                                   cfg.rounds, rng, progress, h2, h3_here)
                    for conn in ("non-persistent", "persistent")}
            connections[profile.name] = {
                "opened": browser.counters.connections,
                "tls_resumed": browser.counters.resumed}
            if path is not None:
                connections[profile.name]["udp_path"] = path.counters
        sys.stderr.write("\n")
        if cfg.table4:
            from replay.overhead.table4 import run_table4

            sys.stderr.write("overhead: Table 4 (notaries over emulated paths)\n")
            table4 = run_table4(cfg.out, tp, served.chain, served.key,
                                3 if cfg.quick else 10)
    doc = {"config": {"quick": cfg.quick, "rounds": cfg.rounds, "seed": cfg.seed, "http2": h2,
                      "http3": h3, "http3_profiles": sorted(h3_on),
                      "profiles": {p.name: asdict(p) for p in cfg.profiles},
                      "page": {"objects": len(page.objects),
                               "hosts": len(page.without_redirects().hosts),
                               "bytes": page.total_bytes(), "html_bytes": page.html_bytes,
                               "host": page.host, "redirects": list(page.redirects),
                               "handshake_waves_non_persistent": _waves(page)},
                      "seconds": round(time.monotonic() - t_start, 1)},
           "results": results, "connections": connections}
    if table4 is not None:
        doc["table4"] = table4
    if firefox is not None:
        doc["browser"] = firefox
    write_report(cfg.out, doc)
    return doc

"""A real browser's page load over the emulated paths: headless Firefox (ESR, driven by
Selenium through geckodriver, as the browser extension's tests drive it) loads the same
synthetic page from the same page server through the same toxiproxy path profiles, over http
and https, and the page load time is the browser's own Navigation Timing (``loadEventEnd``
of the navigation entry, whose ``startTime`` 0 is the navigation's start, so the redirect
hop is in it), with every object's Resource Timing entry.

- **Names and ports.** The page names ``page.test``, ``www.page.test``, ``static1.page.test``
  ... without ports. The profile resolves every name to 127.0.0.1
  (``network.dns.forceResolve``, IPv6 off) and sends port 80 and 443 to two toxiproxy
  proxies, one per scheme, in front of the page server's http and https ports
  (``network.socket.forcePort``); /etc/hosts is not touched. The server picks the page or
  the redirect hop by the Host header, and toxiproxy shapes every connection alike, so one
  proxy per scheme is the same path as the Python client's one per (scheme, host).
- **Trust.** A fresh profile per run, whose NSS database (``certutil``) trusts the page's CA.
- **Connections.** ``non-persistent``: before each load the browser's connections are closed
  (``net:prune-all-connections``, in the browser's chrome context) and TLS session identifiers
  and tickets are off (``security.ssl.disable_session_identifiers``), so every load opens
  fresh connections with full handshakes; within the load Firefox keeps its connections alive
  (at most six per host): no preference we found makes it close a connection after one
  request, as the Python client's non-persistent mode does
  (``network.http.max-persistent-connections-per-server`` 0 acts as 1: one kept-alive
  connection per host, the objects in series).
  ``persistent``: the same page loaded again at once after a non-persistent load of the same
  scheme, on the warm pool it left (the thesis's persistent runs reused connections across
  repeated downloads). Before every load the HTTP and image caches are cleared (and the disk
  and memory caches are off), so every object comes over the network; speculative and
  predictive connections, prefetching, HTTPS-First and HTTP/3 are off.
- **What toxiproxy does not carry.** The TCP handshake's round trip (toxiproxy accepts at
  once): the Python client adds one RTT at connect, Firefox cannot, so Firefox's absolute
  times lack one RTT per connection set-up on the critical path, over http and https alike.

``run_browser_subset`` measures, for each profile and connection mode, https - http of
Firefox's loads paired per round and, in the same rounds, the Python client's
(replay/overhead/client.py, TLS 1.3 full handshakes, its own non-persistent and persistent
modes); ``render_browser_section`` is its Markdown. ``python -m replay.overhead.browser --out
DIR`` runs it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from replay.errors import ReplayError, ReplayInputError, ReplayIOError
from replay.overhead.client import Browser as PythonClient
from replay.overhead.client import Mode
from replay.overhead.pages import MAX_REDIRECTS, QUICK, Page, make_page
from replay.overhead.profiles import PROFILES, PathProfile, get_profiles
from replay.overhead.serving import paths, serve_page, stats
from replay.overhead.toxi import Toxiproxy, explicit_executable, find_toxiproxy
from replay.services import free_port
from replay.sidebyside import MEASURED, Row, Table, markdown

ROOT = Path(__file__).resolve().parents[2]
GECKODRIVER = ROOT / "scripts" / "install-geckodriver"
FIREFOX_ENV = "REPLAY_FIREFOX"  # an explicit Firefox executable
MODES = ("non-persistent", "persistent")
LOAD_TIMEOUT = 60.0

# the path: names and ports (network.socket.forcePort is added per run), connections, caches
PREFS: dict[str, Any] = {
    "network.dns.forceResolve": "127.0.0.1",
    "network.dns.disableIPv6": True,
    "network.proxy.type": 0,
    "network.http.http3.enable": False,
    "network.http.max-persistent-connections-per-server": 6,
    "security.ssl.disable_session_identifiers": True,
    "security.enterprise_roots.enabled": False,
    "browser.cache.disk.enable": False,
    "browser.cache.memory.enable": False,
    "network.http.rcwn.enabled": False,
    # no connection or request the page did not ask for
    "network.http.speculative-parallel-limit": 0,
    "network.predictor.enabled": False,
    "network.prefetch-next": False,
    "network.dns.disablePrefetch": True,
    "browser.urlbar.speculativeConnect.enabled": False,
    "browser.chrome.site_icons": False,  # no favicon request after the load
    "dom.security.https_first": False,
    "dom.security.https_first_pbm": False,
    "dom.security.https_first_schemeless": False,
    "dom.security.https_only_mode": False,
    # the browser's own background traffic off: every name resolves to 127.0.0.1 and port
    # 443 goes to the shaped path, so it would share the page server and the path
    "app.update.enabled": False,
    "app.normandy.enabled": False,
    "toolkit.telemetry.enabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.safebrowsing.update.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.captive-portal-service.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.update.enabled": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.shell.checkDefaultBrowser": False,
}

# chrome context: drop the HTTP and image caches; ``prune`` also closes every connection
RESET_JS = """
const prune = arguments[0];
Services.cache2.clear();
try {
  Cc["@mozilla.org/image/tools;1"].getService(Ci.imgITools)
    .getImgCacheForDocument(null).clearCache();
} catch (e) {}
if (prune) {
  Services.obs.notifyObservers(null, "net:prune-all-connections");
}
return true;
"""

# content: the navigation entry and every resource entry (ms from the navigation's start)
TIMING_JS = """
const n = performance.getEntriesByType("navigation")[0];
if (!n || !(n.loadEventEnd > 0)) { return null; }
const pick = (e) => ({name: e.name, startTime: e.startTime, fetchStart: e.fetchStart,
  connectStart: e.connectStart, secureConnectionStart: e.secureConnectionStart,
  connectEnd: e.connectEnd, requestStart: e.requestStart, responseStart: e.responseStart,
  responseEnd: e.responseEnd, duration: e.duration});
return {navigation: Object.assign(pick(n), {loadEventEnd: n.loadEventEnd,
          domContentLoadedEventEnd: n.domContentLoadedEventEnd}),
        resources: performance.getEntriesByType("resource").map(pick)};
"""

# chrome context: the TLS version of the selected tab's document (nsITransportSecurityInfo)
TLS_JS = """
const si = gBrowser.selectedBrowser.securityUI.secInfo;
return si ? si.protocolVersion : -1;
"""
TLS_VERSIONS = {0: "SSL 3", 1: "TLS 1.0", 2: "TLS 1.1", 3: "TLS 1.2", 4: "TLS 1.3"}


def find_firefox() -> str | None:
    """Firefox's executable: ``$REPLAY_FIREFOX``, else ``firefox-esr`` or ``firefox`` on
    PATH (scripts/install-system-deps installs Firefox ESR); None: not installed."""
    return (explicit_executable(FIREFOX_ENV, "Firefox") or shutil.which("firefox-esr")
            or shutil.which("firefox"))


def find_geckodriver() -> str:
    """geckodriver, built once by scripts/install-geckodriver (cargo)."""
    try:
        r = subprocess.run([str(GECKODRIVER)], capture_output=True, text=True, timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayIOError(f"geckodriver: {GECKODRIVER} failed: {exc}") from exc
    if r.returncode != 0 or not r.stdout.strip():
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReplayIOError(f"geckodriver: {GECKODRIVER} failed: {last}")
    return r.stdout.strip().splitlines()[-1]


def make_profile(where: Path, cafile: Path, ports: dict[str, int],
                 extra: dict[str, Any] | None = None) -> Path:
    """A fresh Firefox profile: the page's CA trusted (certutil), every name on 127.0.0.1,
    port 80 -> ``ports["http"]``, 443 -> ``ports["https"]``, and :data:`PREFS`."""
    if shutil.which("certutil") is None:
        raise ReplayInputError("certutil is missing (Debian: libnss3-tools; "
                               "scripts/install-system-deps installs it)")
    profile = where / "firefox-profile"
    shutil.rmtree(profile, ignore_errors=True)
    profile.mkdir(parents=True)
    for cmd in (["certutil", "-N", "-d", f"sql:{profile}", "--empty-password"],
                ["certutil", "-A", "-d", f"sql:{profile}", "-n", "converge-overhead-ca",
                 "-t", "C,,", "-i", str(cafile)]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise ReplayIOError(f"{' '.join(cmd[:2])}: {r.stderr.strip()[:300]}")
    prefs = dict(PREFS, **{"network.socket.forcePort":
                           f"80={ports['http']};443={ports['https']}"}, **(extra or {}))
    (profile / "user.js").write_text("".join(
        f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items()))
    return profile


class Firefox:
    """One headless Firefox on ``profile`` (a context manager; quit on exit)."""

    def __init__(self, exe: str, profile: Path) -> None:
        try:
            import selenium  # noqa: F401
        except ImportError as exc:
            raise ReplayInputError("selenium is not installed (the project's dev extra: "
                                   "pip install -e '.[dev]')") from exc
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.firefox.service import Service

        opts = webdriver.FirefoxOptions()
        opts.add_argument("-headless")
        opts.add_argument("-profile")
        opts.add_argument(str(profile))
        opts.binary_location = exe
        service = Service(executable_path=find_geckodriver(),
                          service_args=["--allow-system-access"],
                          log_output=str(profile.parent / "geckodriver.log"))
        try:
            self.driver = webdriver.Firefox(options=opts, service=service)
        except WebDriverException as exc:
            raise ReplayIOError(f"Firefox did not start: {exc.msg}") from exc
        self.driver.set_page_load_timeout(LOAD_TIMEOUT)
        self.driver.set_script_timeout(LOAD_TIMEOUT)

    def __enter__(self) -> Firefox:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.driver.quit()

    def _chrome(self, script: str, *args: Any) -> Any:
        with self.driver.context(self.driver.CONTEXT_CHROME):
            return self.driver.execute_script(script, *args)

    def load(self, scheme: str, page: Page, fresh: bool) -> dict[str, Any]:
        """Load ``scheme://<first host>/`` (through the redirect hops to the page); ``fresh``:
        with every connection closed first. Returns the navigation and resource entries, the
        load time ``load_ms`` (loadEventEnd from the navigation's start), and the TLS
        version of an https page."""
        from selenium.common.exceptions import WebDriverException

        try:
            self.driver.get("about:blank")
            self._chrome(RESET_JS, fresh)
            if fresh:
                time.sleep(0.3)  # the prune runs on the socket thread
            self.driver.get(f"{scheme}://{page.first_host}/")
            deadline = time.monotonic() + 10
            timing: dict[str, Any] | None = self.driver.execute_script(TIMING_JS)
            while timing is None and time.monotonic() < deadline:
                time.sleep(0.05)
                timing = self.driver.execute_script(TIMING_JS)
            url = self.driver.current_url
            tls = self._chrome(TLS_JS) if scheme == "https" else None
        except WebDriverException as exc:
            raise ReplayIOError(f"Firefox: {scheme} page load failed: {exc.msg}") from exc
        if timing is None:
            raise ReplayIOError(f"Firefox: no load event for {url} in 10 s")
        if url != f"{scheme}://{page.host}/":
            raise ReplayIOError(f"Firefox ended at {url}, not {scheme}://{page.host}/")
        want = {f"{scheme}://{h}{p}" for h, p in page.objects}
        # the page's objects (a late favicon request may appear as an entry of its own)
        timing["resources"] = [r for r in timing["resources"] if r["name"] in want]
        got = len({r["name"] for r in timing["resources"]})
        if got != len(want) or len(timing["resources"]) != len(want):
            raise ReplayIOError(f"Firefox fetched {got} of the page's {len(want)} objects "
                                f"({len(timing['resources'])} entries; a cache answered?)")
        nav = timing["navigation"]
        timing["load_ms"] = nav["loadEventEnd"]
        timing["from_fetch_ms"] = nav["loadEventEnd"] - nav["fetchStart"]
        # a reused connection has connectEnd == connectStart (== fetchStart); a new one
        # spends its TLS handshake between them (toxiproxy accepts TCP at once, so an http
        # connection's set-up takes no time and cannot be told apart)
        timing["new_tls_connection"] = scheme == "https" and _new_conn(nav)
        timing["new_tls_connections_page_host"] = (
            sum(_new_conn(e) for e in [nav, *timing["resources"]]) if scheme == "https" else 0)
        timing["tls"] = TLS_VERSIONS.get(tls, str(tls)) if tls is not None else None
        return timing


def model_round_trips(page: Page, mode: str) -> int:
    """TLS 1.3's extra round trips on a Firefox load's critical path: non-persistent, one
    full handshake per sequential connection set-up (each redirect hop, the page's host, then
    one wave to the other hosts; further objects reuse the six connections per host);
    persistent, none (every connection warm)."""
    if mode == "persistent":
        return 0
    return len(page.redirects) + 1 + int(any(h != page.host for h, _ in page.objects))


def _new_conn(entry: dict[str, Any]) -> bool:
    """A timing entry fetched on a new connection (its timing details visible: the
    navigation and the page host's own objects; other hosts' are zero, cross-origin)."""
    return bool(entry["connectEnd"] > entry["connectStart"])


def _resource_summary(loads: list[dict[str, Any]]) -> dict[str, float]:
    """Per-resource figures over the loads: the median object duration and the median time
    from the navigation's start to the last object's end."""
    import statistics

    durs = [r["duration"] for t in loads for r in t["resources"]]
    last = [max(r["responseEnd"] for r in t["resources"]) for t in loads]
    return {"objects_per_load": len(loads[0]["resources"]) if loads else 0,
            "median_object_ms": statistics.median(durs) if durs else 0.0,
            "median_last_object_end_ms": statistics.median(last) if last else 0.0}


def _paired(http: list[float], https: list[float]) -> dict[str, Any]:
    """:func:`stats`, and ``fastest_ms``: the fastest https load minus the fastest http load
    (on a busy machine a load's time has the CPU's queueing in it, at random; the fastest
    loads have the least of it)."""
    s = stats(http, https)
    s["fastest_ms"] = (min(https) - min(http)) * 1000
    return s


def _firefox_stats(http: list[dict[str, Any]], https: list[dict[str, Any]]) -> dict[str, Any]:
    s = _paired([t["load_ms"] / 1000 for t in http], [t["load_ms"] / 1000 for t in https])
    s["https_from_fetch_s"] = [t["from_fetch_ms"] / 1000 for t in https]
    s["http_from_fetch_s"] = [t["from_fetch_ms"] / 1000 for t in http]
    s["https_new_tls_connection_share"] = (
        sum(t["new_tls_connection"] for t in https) / len(https))
    s["https_new_tls_connections_page_host_mean"] = (
        sum(t["new_tls_connections_page_host"] for t in https) / len(https))
    s["tls_versions"] = sorted({t["tls"] for t in https if t["tls"]})
    s["resources"] = {"http": _resource_summary(http), "https": _resource_summary(https)}
    return s


def _measure_profile(ff: Firefox, py: PythonClient | None, page: Page, rounds: int,
                     modes: Sequence[str], rng: random.Random) -> dict[str, Any]:
    fx: dict[tuple[str, str], list[dict[str, Any]]] = {
        (m, s): [] for m in MODES for s in ("http", "https")}
    pt: dict[tuple[str, str], list[float]] = {(m, s): [] for m in modes
                                              for s in ("http", "https")}
    for _ in range(rounds):
        schemes = ["http", "https"]
        rng.shuffle(schemes)
        for scheme in schemes:  # a non-persistent load, then the same again on its pool
            fx[("non-persistent", scheme)].append(ff.load(scheme, page, fresh=True))
            if "persistent" in modes:
                fx[("persistent", scheme)].append(ff.load(scheme, page, fresh=False))
        if py is not None:
            order = list(pt)
            rng.shuffle(order)
            for m, scheme in order:
                mode = Mode(scheme, m == "persistent", "1.3" if scheme == "https" else "")
                pt[(m, scheme)].append(py.load(page, mode))
    out: dict[str, Any] = {}
    for m in modes:
        out[m] = {"firefox": _firefox_stats(fx[(m, "http")], fx[(m, "https")])}
        out[m]["firefox"]["model_round_trips"] = model_round_trips(page, m)
        if py is not None:
            out[m]["python"] = _paired(pt[(m, "http")], pt[(m, "https")])
    return out


def run_browser_subset(out: Path, profiles: Sequence[PathProfile] = (PROFILES["thesis"],),
                       rounds: int = 3, seed: int = 1, modes: Sequence[str] = MODES,
                       python: bool = True, page: Page | None = None,
                       redirects: int = -1) -> dict[str, Any]:
    """Firefox's https - http per profile and mode (``MODES``), ``rounds`` paired loads each
    after one unmeasured warm-up of each scheme, and (``python``) the Python client's in the
    same rounds. ``page``: the page (default: the quick page, ``redirects`` hops)."""
    if not 1 <= rounds <= 200:
        raise ReplayInputError("browser rounds must be in [1, 200]")
    if not modes or any(m not in MODES for m in modes):
        raise ReplayInputError(f"browser modes are among {', '.join(MODES)}")
    if not -1 <= redirects <= MAX_REDIRECTS:
        raise ReplayInputError(f"redirects must be in [0, {MAX_REDIRECTS}]")
    exe = find_firefox()
    if exe is None:
        raise ReplayInputError("Firefox is not installed (firefox-esr: "
                               "scripts/install-system-deps installs it)")
    toxi = find_toxiproxy()
    if page is None:
        shape = QUICK if redirects < 0 else replace(QUICK, redirects=redirects)
        page = make_page(shape, seed)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplayIOError(f"cannot create {out}: {exc}") from exc
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    rng = random.Random(seed)
    results: dict[str, Any] = {}
    with serve_page(out, page, h2=False) as served, \
            Toxiproxy(toxi, free_port(), out / "toxiproxy-browser.log") as tp:
        ff_ports = {s: tp.proxy(f"firefox-{s}", served.upstreams[s]) for s in ("http", "https")}
        py_ports, py_names = paths(tp, page, served.upstreams) if python else ({}, [])
        profile_dir = make_profile(out, served.cafile, ff_ports)
        with Firefox(exe, profile_dir) as ff:
            for i, profile in enumerate(profiles):
                for name in [*(f"firefox-{s}" for s in ff_ports), *py_names]:
                    tp.shape(name, profile)
                if i == 0:  # the browser's own first-use costs, unmeasured
                    for scheme in ("http", "https"):
                        ff.load(scheme, page, fresh=True)
                py = (PythonClient(py_ports, profile, str(served.cafile), seed)
                      if python else None)
                results[profile.name] = _measure_profile(ff, py, page, rounds, modes, rng)
                sys.stderr.write(f"browser: {profile.name} done, "
                                 f"{time.monotonic() - t0:.0f} s\n")
            version = ff.driver.capabilities.get("browserVersion", "?")
    return {"config": {"firefox": version, "rounds": rounds, "seed": seed,
                       "modes": list(modes), "python": python,
                       "profiles": {p.name: asdict(p) for p in profiles},
                       "page": {"objects": len(page.objects),
                                "hosts": len(page.without_redirects().hosts),
                                "redirects": list(page.redirects),
                                "bytes": page.total_bytes()},
                       "seconds": round(time.monotonic() - t0, 1),
                       "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)]},
            "results": results}


def _fmt(s: dict[str, Any]) -> str:
    return (f"median {s['median_ms']:.0f} ms ({s['median_pct']:.1f}%), mean "
            f"{s['mean_ms']:.0f} ms ({s['mean_pct']:.1f}%), fastest loads "
            f"{s['fastest_ms']:.0f} ms")


def browser_table(result: dict[str, Any]) -> Table:
    cfg = result["config"]
    rows = [Row("browser", f"Firefox {cfg['firefox']} headless (Selenium, geckodriver)", "-",
                "-", "-", "one browser, one profile for the run; rounds "
                f"{cfg['rounds']}; load average {cfg['load_average'][0]} -> "
                f"{cfg['load_average'][1]}")]
    for prof, by_mode in result["results"].items():
        rtt = cfg["profiles"][prof]["rtt_ms"]
        for mode, r in by_mode.items():
            f = r["firefox"]
            rt = (f" = {f['mean_ms'] / rtt:.1f} RTT of {rtt} ms (model "
                  f"{f['model_round_trips']} RTT)") if rtt else ""
            tls = ", ".join(f["tls_versions"]) or "?"
            rows.append(Row(
                f"{prof}, {mode}, Firefox", _fmt(f), "-", "-", MEASURED,
                f"loadEventEnd (Navigation Timing); http {f['http_mean_s'] * 1000:.0f} ms, "
                f"https {f['https_mean_s'] * 1000:.0f} ms (means){rt}; {tls}; new TLS "
                f"connection for the page in {f['https_new_tls_connection_share']:.0%} of "
                f"the https loads, "
                f"{f['https_new_tls_connections_page_host_mean']:.1f} new TLS connections to "
                f"its host per load; n={f['n']}"))
            p = r.get("python")
            if p is not None:
                rows.append(Row(
                    f"{prof}, {mode}, Python client (same rounds)", _fmt(p), "-", "-",
                    MEASURED, f"TLS 1.3 full handshakes; http {p['http_mean_s'] * 1000:.0f} "
                    f"ms, https {p['https_mean_s'] * 1000:.0f} ms (means); n={p['n']}"))
    return Table("A real browser: Firefox's page load (https - http) beside the Python "
                 "client's", tuple(rows), paper_label="thesis", footnote=(
                     "Firefox non-persistent: every connection closed and no TLS session "
                     "reuse before each load, keep-alive within the load (no Firefox "
                     "preference found closes a connection after each request, as the "
                     "Python client's non-persistent mode does); persistent: the page again "
                     "at once on the warm pool. Firefox's times lack the TCP handshake's "
                     "round trip (toxiproxy does not carry it; the Python client adds it), "
                     "over http and https alike."))


def render_browser_section(result: dict[str, Any]) -> str:
    """The browser subset as a Markdown section (for overhead.md)."""
    return markdown(browser_table(result)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m replay.overhead.browser",
                                description="Firefox's page load over http and https "
                                "through the emulated paths, beside the Python client's.")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--profiles", default="thesis")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-python", action="store_true",
                   help="Firefox only (no Python client rounds)")
    a = p.parse_args(argv)
    try:
        res = run_browser_subset(a.out, get_profiles(a.profiles), a.rounds, a.seed,
                                 python=not a.no_python)
    except ReplayError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return 2
    (a.out / "browser.json").write_text(json.dumps(res, indent=2) + "\n")
    section = render_browser_section(res)
    (a.out / "browser.md").write_text(section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``overhead.json`` and ``overhead.md``: ours beside the 2015 thesis "Minimal Certificate
Authority Chain of Trust" (its Tables 1-2 and Figures 2-13), each row marked input, measured
or model, in the tables of ``replay reproduce`` (replay/sidebyside.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from replay.sidebyside import INPUT, MEASURED, MODEL, Row, Table, markdown, text

THESIS = {"np_http_s": 2.72, "np_https_s": 3.156, "np_mean_ms": 436, "np_mean_pct": 16.1,
          "np_median_ms": 200, "np_median_pct": 20, "np_p75_ms": 350, "np_p90_ms": 1100,
          "p_median_ms": 90, "p_median_pct": 15, "p_mean_pct": 15, "rtt_ms": 90}

DIFFERENCES = (
    "Where ours and the thesis's differ, and why: (1) one synthetic page on every path "
    "instead of the top 100 sites, so our spread (75th/90th percentiles) is the path's "
    "jitter, not the sites' variety; (2) the thesis's sites had their own servers, CDNs, "
    "SPDY on some and redirects on others, http -> https on some (some https loads were "
    "faster than http); ours has the same redirect hop(s) over http and https (to www., a "
    "new connection) and is one aiohttp server on loopback, so the difference is the "
    "protocol's round trips and cryptography alone; (3) toxiproxy's bandwidth is per "
    "connection, so six parallel connections get six times the profile's rate, and there is"
    " no loss and no TCP slow start across the emulated path (loopback windows), which "
    "shortens transfer-bound loads; (4) the TCP handshake's round trip is added by the "
    "client at connect (toxiproxy does not carry it), the same for http and https; (5) the "
    "thesis's 'persistent' runs reused connections across repeated downloads of a page, "
    "ours within one load (six per host), the session cache across loads only in the "
    "+resume variants.")


def _ms(x: float) -> str:
    return f"{x:.0f} ms"


def _pc(x: float) -> str:
    return f"{x:.1f}%"


def tables(doc: dict[str, Any]) -> list[Table]:
    cfg, res = doc["config"], doc["results"]
    page = cfg["page"]
    inputs = [Row(f"path profile {name}",
                  f"RTT {p['rtt_ms']} ms +- {p['jitter_ms']} ms, "
                  f"{p['down_kbit'] / 1000:g}/{p['up_kbit'] / 1000:g} Mbit/s", "-", "-",
                  INPUT, p["source"]) for name, p in cfg["profiles"].items()]
    inputs.append(Row("page", f"HTML {page['html_bytes'] / 1000:.0f} KB + {page['objects']} "
                      f"objects on {page['hosts']} hosts, {page['bytes'] / 1e6:.2f} MB",
                      "top 100 Alexa sites", "no", MODEL,
                      "log-normal object sizes, hand-chosen (replay/overhead/pages.py)"))
    hops = page.get("redirects", [])
    chain = " -> ".join([*hops, page.get("host", "www.page.test")])
    inputs.append(Row("redirects before the page", f"{len(hops)} hop(s): {chain}"
                      if hops else "none", "yes, on popular sites (not counted)", "approx.",
                      MODEL, "each hop a new connection to another host, in the load's "
                      "scheme (http and https alike); the number is chosen here"))
    inputs.append(Row("TCP handshake", "one RTT (+- jitter) added at connect", "-", "-", MODEL,
                      "toxiproxy accepts locally and delays data only"))
    if cfg.get("http3"):
        inputs.append(Row("UDP path (HTTP/3)", "the same profiles through our UDP emulator "
                          "(replay/overhead/udppath.py): delay, jitter, rate, loss per "
                          "datagram", "-", "-", MODEL,
                          "toxiproxy carries TCP only; QUIC's handshake and slow start cross "
                          "the emulated path, TCP's do not (toxiproxy ends TCP on loopback)"))
    out = [Table("Inputs of replay overhead", tuple(inputs), paper_label="thesis")]

    th = res.get("thesis")
    if th:
        np12 = th["non-persistent"]["tls1.2"]
        p12 = th["persistent"]["tls1.2"]
        rows = [
            Row("non-persistent: mean download time http / https",
                f"{np12['http_mean_s']:.3f} s / {np12['https_mean_s']:.3f} s",
                f"{THESIS['np_http_s']} s / {THESIS['np_https_s']} s", "approx.", MODEL,
                "absolute times are the page model's: not comparable"),
            Row("non-persistent: mean overhead", _ms(np12["mean_ms"]),
                f"{THESIS['np_mean_ms']} ms", "approx.", MEASURED,
                f"{np12['overhead_round_trips']:.1f} RTT of {THESIS['rtt_ms']} ms; the thesis: "
                "'about 4 round trip times'"),
            Row("non-persistent: overhead % (of the means)", _pc(np12["pct_of_means"]),
                f"{THESIS['np_mean_pct']}%", "yes", MEASURED,
                "depends on the page's http time (the page model)"),
            Row("non-persistent: median overhead", _ms(np12["median_ms"]),
                f"~{THESIS['np_median_ms']} ms (180 ms 2nd run)", "approx.", MEASURED, ""),
            Row("non-persistent: median overhead %", _pc(np12["median_pct"]),
                f"~{THESIS['np_median_pct']}%", "approx.", MEASURED, ""),
            Row("non-persistent: 75th / 90th percentile",
                f"{_ms(np12['p75_ms'])} / {_ms(np12['p90_ms'])}",
                f"~{THESIS['np_p75_ms']} ms / ~1.1 s", "no", MEASURED,
                "ours: one page, jitter only; the thesis's: 100 sites x 11 vantage points"),
            Row("non-persistent: handshake model",
                f"{np12['model_round_trips']} RTT = {_ms(np12['model_ms'])}", "-", "-", MODEL,
                f"2 extra round trips per TLS 1.2 handshake x "
                f"{page['handshake_waves_non_persistent']} sequential connection set-ups on "
                "the critical path (one per redirect hop, the page, then ceil(objects per "
                "host / 6))"),
            Row("persistent: median overhead", _ms(p12["median_ms"]),
                f"~{THESIS['p_median_ms']} ms", "approx.", MEASURED, ""),
            Row("persistent: median overhead %", _pc(p12["median_pct"]),
                f"~{THESIS['p_median_pct']}%", "approx.", MEASURED, ""),
            Row("persistent: overhead % (of the means)", _pc(p12["pct_of_means"]),
                f"{THESIS['p_mean_pct']}%", "yes", MEASURED, ""),
            Row("persistent: handshake model",
                f"{p12['model_round_trips']} RTT = {_ms(p12['model_ms'])}", "-", "-", MODEL,
                "one per redirect hop, the page's connection, then one wave of new "
                "connections to the other hosts"),
        ]
        out.append(Table("Thesis Tables 1-2, Figures 2-13: HTTPS overhead, TLS 1.2, over the "
                         "thesis's 90 ms RTT", tuple(rows), paper_label="thesis",
                         footnote=DIFFERENCES))
    rows = []
    for prof, by_conn in res.items():
        for conn in ("non-persistent", "persistent"):
            for label, s in by_conn[conn].items():
                if label.startswith("_"):
                    continue
                rows.append(Row(
                    f"{prof}, {conn}, {label}",
                    f"median {_ms(s['median_ms'])} ({_pc(s['median_pct'])}), mean "
                    f"{_ms(s['mean_ms'])} ({_pc(s['mean_pct'])})", "-", "-", MEASURED,
                    f"http {s['http_mean_s'] * 1000:.0f} ms; model {_ms(s['model_ms'])} "
                    f"({s['model_round_trips']} RTT); n={s['n']}"))
    out.append(Table("HTTPS overhead (https - http) per path and connection mode: what TLS "
                     "1.3 and session resumption change", tuple(rows), paper_label="thesis",
                     footnote="TLS 1.2 full handshake: 2 extra round trips; TLS 1.2 resumed, "
                     "TLS 1.3 full or resumed (no 0-RTT): 1. h2+tls1.3: HTTP/2 (hypercorn serving, "
                     "httpcore[http2] loading), one multiplexed TLS 1.3 connection per host, "
                     "against the same round's HTTP/1.1 http load (persistent rows only; "
                     "absent when h2 is not installed). h3, h3+0rtt: HTTP/3 (aioquic both "
                     "sides) over the UDP path emulator, one QUIC connection per host, against "
                     "the same round's http load over TCP (persistent rows only; with --quick "
                     "on the thesis profile only); model, in round trips, the rate left out: "
                     "QUIC's 1-RTT handshake costs what http's TCP handshake does, QUIC's slow "
                     "start crosses the emulated path (10 datagrams, doubling) where the TCP "
                     "rows have none, one connection per host saves HTTP/1.1's six-connection "
                     "GET waves, and 0-RTT early data (the last visit's ticket) saves a round "
                     "trip where the first response fits the ~3 KB a server may send before "
                     "the client's address is validated. Above the model: tens of ms"
                     " in every "
                     "variant from simultaneous handshakes' CPU on this machine (a wave opens "
                     "up to six connections per host at once); a TLS 1.3 connection adds no "
                     "round trip (python -m replay.overhead.excess; docs/replay.md)."))
    if doc.get("table4"):
        out.append(_table4(doc["table4"]))
    if doc.get("browser"):
        from replay.overhead.browser import browser_table

        out.append(browser_table(doc["browser"]))
    return out


def _table4(t4: dict[str, Any]) -> Table:
    from replay.overhead.table4 import STUDY

    rows = [Row("local cache hit", "-", "108 ms", "-", "-",
                "no network: the client-cost step of replay reproduce measures it")]
    go_skipped = ""
    for label, r in t4.items():
        study = STUDY.get(label)
        rtts = "/".join(str(x) for x in r["notary_rtts_ms"])
        go = r.get("go") or {"skipped": "not measured"}
        go_skipped = go.get("skipped", "")
        clients = [("Python", r, "")]
        if not go_skipped:
            clients.append(("Go", go, f"; Go conformance CLI, each call's wall time minus "
                            f"the median of {go['info_calls']} info calls (process start, "
                            f"{go['process_start_ms']:.0f} ms)"))
        for client, res, note in clients:
            for proto in ("legacy", "extended"):
                m = res[proto]
                for kind, i in (("hit", 0), ("miss", 1)):
                    rows.append(Row(
                        f"notary cache {kind}, {label}, {proto} protocol, {client} client",
                        f"{m[f'{kind}_ms']:.0f} ms measured, "
                        f"{m[f'{kind}_plus_tcp_ms']:.0f} ms + TCP",
                        f"{study[i]:,} ms" if study else "-",
                        "approx." if study and proto == "legacy" else "no", MEASURED,
                        f"notaries at RTT {rtts} ms (model); median of {m['n']}; + TCP: one "
                        "RTT of the slowest notary per connection toxiproxy does not carry"
                        + ("; a miss waits for the transparency log" if proto == "extended"
                           and kind == "miss" else "") + note))
    if go_skipped:
        rows.append(Row("Go client (compiled)", "skipped", "-", "-", "-", go_skipped))
    return Table("Study Table 4: converge() of the Python and Go clients over emulated notary "
                 "paths", tuple(rows), footnote="The study's notaries were real machines on "
                 "the internet (wget to each, results cached in sqlite3); ours are notary "
                 "serve processes on this machine behind toxiproxy, at distances chosen here. "
                 "The Python client is timed in process around Client.check; the Go client "
                 "through its conformance CLI, one process per call, its start subtracted.")


def figures_md(drawn: dict[str, int]) -> str:
    """The figures' section of overhead.md: links to the PNG files next to it."""
    from replay.overhead.plots import FILES

    head = ("## Figures (the thesis's Figures 2-13: ours measured, the thesis's reference "
            "points marked X)\n\n")
    if not drawn:
        return head + "Not drawn: this document has no per-load samples.\n"
    captions = {FILES["cdf_ms"]: "CDF of the overhead in ms, per profile, TLS variant and "
                "connection mode (thesis: median ~200 ms, 75th percentile ~350 ms, 90th "
                "~1.1 s non-persistent; median ~90 ms persistent)",
                FILES["cdf_pct"]: "CDF of the overhead in % of the http time (thesis: "
                "median ~20% non-persistent, ~15% persistent)",
                FILES["vs_http"]: "overhead against the page's http time, TLS 1.2 (thesis: "
                "the overhead in ms about the same whatever the http time; its mean 2.72 s, "
                "+436 ms)"}
    return head + "".join(f"- [{captions[f]}]({f}) ({n} lines or points of ours)\n"
                          f"\n  ![{f}]({f})\n" for f, n in drawn.items())


def write_report(out: Path, doc: dict[str, Any]) -> None:
    from replay.overhead.plots import write_plots

    ts = tables(doc)
    drawn = write_plots(out, doc)
    doc = dict(doc, tables=[{"title": t.title, "rows": [r.cells() for r in t.rows],
                             "footnote": t.footnote} for t in ts], figures=sorted(drawn))
    (out / "overhead.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "overhead.md").write_text(
        "# HTTPS overhead over emulated paths\n\n"
        + "\n\n".join(markdown(t) for t in ts) + "\n\n" + figures_md(drawn),
        encoding="utf-8")


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without the per-load samples (what ``--record`` keeps in bench/results)."""
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if k not in ("http_s", "https_s", "hit_samples_ms", "miss_samples_ms")}
        return x

    return {k: strip(v) for k, v in doc.items() if k not in ("tables", "figures")}


def summary(doc: dict[str, Any]) -> str:
    return "\n\n".join(text(t) for t in tables(doc))

"""Pure summaries of a run: medians, paired ratios, and the Markdown table (no IO here)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# The 2014 study's notary (Forced Perspectives, IMC 2014, section 3) for comparison.
STUDY = {
    "cached_per_s": 1051,
    "cached_cores": 8,
    "uncached_per_s": 199,
    "source": "Forced Perspectives (IMC 2014), sections 3.2-3.3: Apache bench against "
              "Convergence 0.4, 16 processes on two 4-core Xeon E5606",
}

METRICS = ("rate", "p50_ms", "p99_ms", "mean_ms", "server_cpu_us_per_request",
           "target_cpu_us_per_request", "client_cpu_us_per_handshake", "signature_cpu_us")

# The goals of the probe path (docs/benchmarks.md, "Live probes against the floor").
FLOOR_FACTOR = 1.25  # notary CPU per forced probe / the floor
PROBE_RATE = 0.80  # forced-probe rate / the target's raw handshake rate, 16 and 64 conns
BOTH_EXTRA_US = 300.0  # --verifier both over perspective only, CPU per probe
DRIVER_FACTOR = 1.05  # aiosqlite CPU per probe / the one-thread executor's


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def summarize(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians of the per-trial figures, and totals of the counters, over a list of trials."""
    out: dict[str, Any] = {"trials": len(trials)}
    for key in METRICS:
        vals = [float(t[key]) for t in trials if t.get(key) is not None]
        if vals:
            out[key] = median(vals)
    for key in ("requests", "connections"):
        if any(key in t for t in trials):
            out[key] = sum(int(t.get(key, 0)) for t in trials)
    for key in ("errors", "statuses", "cache_status"):
        merged: dict[str, int] = {}
        for t in trials:
            for k, v in (t.get(key) or {}).items():
                merged[k] = merged.get(k, 0) + int(v)
        if merged or any(key in t for t in trials):
            out[key] = merged
    return out


def paired_ratios(subject: Sequence[Mapping[str, Any]],
                  baseline: Sequence[Mapping[str, Any]]) -> list[float]:
    """rate(subject_i) / rate(baseline_i) for trials measured next to each other."""
    if len(subject) != len(baseline):
        raise ValueError("paired trials must have the same count")
    return [
        float(s["rate"]) / float(b["rate"]) if float(b["rate"]) > 0 else 0.0
        for s, b in zip(subject, baseline, strict=True)
    ]


def compare(subject: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]],
            target: float | None) -> dict[str, Any]:
    """The headline ratio is the median of the paired per-trial ratios."""
    ratios = paired_ratios(subject, baseline)
    s, b = summarize(subject), summarize(baseline)
    ratio = median(ratios)
    cpu = [
        float(bt["server_cpu_us_per_request"]) / float(st["server_cpu_us_per_request"])
        for st, bt in zip(subject, baseline, strict=True)
        if st.get("server_cpu_us_per_request") and bt.get("server_cpu_us_per_request")
    ]
    return {
        "cpu_ratio": median(cpu) if cpu else None,
        "ratio": ratio,
        "ratio_of_medians": s["rate"] / b["rate"] if b.get("rate") else None,
        "paired_ratios": ratios,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "target": target,
        "meets_target": None if target is None else ratio >= target,
    }


def probe_goals(sc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The floor of a forced probe and the probe path's goals, from one run's scenarios.

    floor = the client CPU of one ``openssl s_time -new`` handshake against the target +
    one legacy signature with the notary's key, both medians over the run's ``s_time``
    trials (every forced-probe scenario's baseline). None without a forced-probe scenario.
    """
    probes = {k: v for k, v in sc.items() if k.startswith("forced_probes")}
    if not probes:
        return None
    hs = [float(t["client_cpu_us_per_handshake"]) for v in probes.values()
          for t in v["trials"]["baseline"] if t.get("client_cpu_us_per_handshake")]
    sig = [float(t["signature_cpu_us"]) for v in probes.values()
           for t in v["trials"]["baseline"] if t.get("signature_cpu_us")]
    if not hs or not sig:
        return None
    floor = median(hs) + median(sig)
    # the probe library's own handshake in this process (bench/notary/floor.py): the
    # notary's own work is its CPU over this plus the signature
    lib = [float(t["library_handshake_cpu_us"]) for v in probes.values()
           for t in v["trials"]["baseline"] if t.get("library_handshake_cpu_us")]
    lib_floor = median(lib) + median(sig) if lib else None

    def cpu(key: str) -> float | None:
        v = probes.get(key)
        return None if v is None else v["notary"].get("server_cpu_us_per_request")

    per: dict[str, dict[str, float | None]] = {}
    for k in probes:
        c = cpu(k)
        per[k] = {"cpu_us": c, "floor_ratio": None if c is None else c / floor,
                  "library_floor_ratio": None if c is None or lib_floor is None
                  else c / lib_floor}
    goals: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, limit: float, at_most: bool, unit: str) -> None:
        if value is None:
            return
        goals.append({"goal": name, "value": value, "limit": limit, "unit": unit,
                      "at_most": at_most,
                      "met": value <= limit if at_most else value >= limit})

    c1 = cpu("forced_probes")
    goal("1. notary CPU per forced probe / floor", None if c1 is None else c1 / floor,
         FLOOR_FACTOR, True, "x")
    for key in ("forced_probes", "forced_probes_64"):
        if key in probes:
            goal(f"2. forced-probe rate / target's raw handshakes, "
                 f"{probes[key].get('connections', '?')} connections",
                 probes[key]["compare"]["ratio"], PROBE_RATE, False, "x")
    cb = cpu("forced_probes_both")
    goal("3. --verifier both, extra CPU per probe", None if cb is None or c1 is None
         else cb - c1, BOTH_EXTRA_US, True, "us")
    ct = cpu("forced_probes_thread")
    goal("4. aiosqlite / one-thread executor, CPU per probe",
         None if ct is None or c1 is None else c1 / ct, DRIVER_FACTOR, True, "x")
    return {"floor_us": floor, "handshake_client_cpu_us": median(hs),
            "signature_cpu_us": median(sig), "library_handshake_cpu_us":
            median(lib) if lib else None, "library_floor_us": lib_floor,
            "scenarios": per, "goals": goals}


def error_count(summary: Mapping[str, Any]) -> int:
    """Socket errors (connect/read/write/timeout) plus unexpected answers."""
    errs = summary.get("errors") or {}
    return sum(int(v) for k, v in errs.items() if k != "status") + int(
        summary.get("unexpected", 0)
    )


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_us(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# Alternatives for the probe path that were measured and not kept (a record, not this run's
# figures): forced probes, 1 worker, 16 connections, the notary's per-thread CPU from /proc,
# runs of 6 s alternated with the kept code on 2026-11-25.
PROBE_PATH_NOTES = (
    "Where a probe's CPU goes (per-thread CPU from `/proc`, 1 worker, 16 connections): the "
    "event-loop thread ~1,350 µs (the TLS handshake ~600 µs, the signature ~270 µs, the "
    "rest HTTP, the probe flight and the store round trips), the SQLite driver's thread "
    "~170 µs. Measured on 2026-11-25 and not kept: the handshake on a blocking socket in a "
    "probe thread pool cost 1,756 against 1,616 µs per probe (a single sequential client "
    "also spends more: 625-638 against 572-581 µs per handshake, the thread hand-offs "
    "costing more than the memory BIO); a minimal memory-BIO handshake protocol in Python "
    "instead of uvloop's compiled TLS transport cost 1,615-1,686 against 1,537-1,579 µs. "
    "Kept: one SQL statement per store operation on aiosqlite, 1,509-1,538 µs against "
    "1,582 µs for the earlier seven-statement transaction on the one-thread executor.",
    "",
)


def _goal_value(x: float, unit: str) -> str:
    return f"{x:,.0f} µs" if unit == "us" else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def busy(machine: Mapping[str, Any]) -> bool:
    """Whether other load (1-minute load average above the CPU count) shared the run."""
    n = machine.get("nproc") or 1
    loads = [x for x in (machine.get("loadavg_before"), machine.get("loadavg_after")) if x]
    return any(float(x[0]) > n for x in loads)


def _load_warning(machine: Mapping[str, Any]) -> list[str]:
    if not busy(machine):
        return []
    return [
        "**The machine was busy with other work during this run** (1-minute load average "
        "above the CPU count): absolute rates are low and per-trial ratios scatter; the "
        "medians of paired ratios and the CPU-per-request figures are the ones to read.",
        "",
    ]


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The human table for docs/benchmarks.md."""
    m = doc["machine"]
    s = doc["settings"]
    sc = doc["scenarios"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench-record` (`CONVERGE_RECORD=1 python -m bench.run_all`); do not",
        "edit by hand. The machine-readable results are in `bench/results/notary.json`.",
        "",
        f"Run: {doc['started_at']} to {doc['finished_at']} on {m['nproc']} CPUs "
        f"({m.get('cpu_model') or 'unknown CPU'}), Python {m['python']}, "
        f"{m.get('wrk') or 'wrk'}, {m.get('openssl') or 'openssl'}; "
        f"load average before/after {m.get('loadavg_before')} / {m.get('loadavg_after')}; "
        f"commit {str(doc.get('commit') or '?')[:12]}.",
        "",
        *_load_warning(m),
        "## Notary",
        "",
        "| Scenario | Notary rate/s | p50 ms | p99 ms | Errors | Baseline | Baseline rate/s "
        "| Ratio (min-max) | Target | Met | CPU µs/req notary / baseline | CPU ratio |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for row in sc.values():
        n, b, c = row["notary"], row["baseline"], row["compare"]
        met = c["meets_target"]
        lines.append(
            f"| {row['title']} | {_fmt_rate(n.get('rate'))} | {_fmt_ms(n.get('p50_ms'))} "
            f"| {_fmt_ms(n.get('p99_ms'))} | {error_count(n)} | {row['baseline_title']} "
            f"| {_fmt_rate(b.get('rate'))} | {_pct(c['ratio'])} "
            f"({_pct(c['ratio_min'])}-{_pct(c['ratio_max'])}) | {_pct(c['target'])} "
            f"| {'-' if met is None else ('yes' if met else '**no**')} "
            f"| {_fmt_us(n.get('server_cpu_us_per_request'))} / "
            f"{_fmt_us(b.get('server_cpu_us_per_request'))} | {_pct(c.get('cpu_ratio'))} |"
        )
    lines += [
        "",
        "Rates and latencies are medians over the trials; the ratio is the median of the",
        "per-trial ratios, each trial's notary run paired with the baseline run next to it.",
        "CPU µs/req is the server process's own CPU time (user + system, all threads, from",
        "`/proc`) per answered request; the CPU ratio (baseline CPU / notary CPU per request,",
        "median of pairs) is what the rate ratio would be with a whole core for each server,",
        "and is much less sensitive to other load on a shared machine than the rates.",
        "Errors are socket errors and timeouts plus answers other than the expected status",
        "and `Cache-Status` (every cached trial must be all `200` + `hit`; every probe trial",
        "all `409` + `fwd=miss`).",
        "",
        "Baseline latencies (p50 / p99 ms): "
        + "; ".join(
            f"{row['title']}: {_fmt_ms(row['baseline'].get('p50_ms'))} / "
            f"{_fmt_ms(row['baseline'].get('p99_ms'))}"
            for row in sc.values()
        )
        + ".",
        "",
    ]
    tls = sc.get("cached_tls_per_request")
    if tls is not None and tls.get("mean_ms_incl_handshake"):
        mm = tls["mean_ms_incl_handshake"]
        lines += [
            "New TLS connection per request: wrk's latencies start after the handshake; the "
            "mean time per request including it (connections / rate) was "
            f"{_fmt_ms(mm.get('notary'))} ms for the notary and {_fmt_ms(mm.get('baseline'))} "
            "ms for the baseline.",
            "",
        ]
    full = sc.get("cached_tls_full_handshake")
    if full is not None:
        lines += [
            "Full handshake per request: s_time reports no percentiles; the mean time per "
            f"request including the handshake (clients / rate) was "
            f"{_fmt_ms(full['notary'].get('mean_ms'))} ms for the notary and "
            f"{_fmt_ms(full['baseline'].get('mean_ms'))} ms for the baseline.",
            "",
        ]
    probes = sc.get("forced_probes")
    if probes is not None and probes.get("verification"):
        v = probes["verification"]
        lines += [
            f"Probe check: {v.get('probes_counted', '?')} live probes counted by the notary's "
            f"metrics for {v.get('requests', '?')} requests answered ({v.get('note', '')}). "
            "CPU per probe request: notary "
            f"{_fmt_us(probes['notary'].get('server_cpu_us_per_request'))} µs, target "
            f"{_fmt_us(probes['notary'].get('target_cpu_us_per_request'))} µs; the target "
            "used "
            f"{_fmt_us(probes['baseline'].get('target_cpu_us_per_request'))} µs per `s_time` "
            "handshake.",
            "",
        ]
    pg = doc.get("probe_goals")
    if pg:
        lines += [
            "## Live probes against the floor",
            "",
            "The floor of one forced probe is what any notary must spend on it: the client "
            "side of one TLS handshake with the target (CPU of `openssl s_time -new`, user + "
            f"system, per handshake: {_fmt_us(pg['handshake_client_cpu_us'])} µs) plus one "
            f"legacy signature with the notary's key ({_fmt_us(pg['signature_cpu_us'])} µs), "
            f"so {_fmt_us(pg['floor_us'])} µs in this run. The notary's probe does its "
            "handshake in pyOpenSSL on the OpenSSL `cryptography` ships, which costs less "
            "than `s_time`'s system OpenSSL: that library's own handshake, in a plain "
            "loop in one process, took "
            f"{_fmt_us(pg.get('library_handshake_cpu_us'))} µs, so the notary's own work "
            "is the last column's excess over 1.",
            "",
            "| Scenario | Notary CPU µs per probe | / floor | / (library handshake + signature) |",
            "|---|---:|---:|---:|",
            *(f"| {sc[k]['title']} | {_fmt_us(v['cpu_us'])} | "
              f"{_fmt_ratio(v['floor_ratio'])} | {_fmt_ratio(v.get('library_floor_ratio'))} |"
              for k, v in pg["scenarios"].items()),
            "",
            "| Goal | Measured | Limit | Met |",
            "|---|---:|---:|---|",
            *(f"| {g['goal']} | {_goal_value(g['value'], g['unit'])} | "
              f"{'≤' if g['at_most'] else '≥'} {_goal_value(g['limit'], g['unit'])} "
              f"| {'yes' if g['met'] else '**no**'} |" for g in pg["goals"]),
            "",
            *PROBE_PATH_NOTES,
        ]
    st = doc["study"]
    lines += [
        "## The study's notary, for comparison",
        "",
        f"The 2014 study ({st['source']}) measured {st['cached_per_s']:,} cached validations/s "
        f"on {st['cached_cores']} cores and {st['uncached_per_s']} uncached (probing) "
        "validations/s, the target a web server on the same LAN. The figures above are for "
        f"one notary process (two for the last row) on {m['nproc']} shared cores, with the "
        "load generator and the TLS target on the same machine.",
        "",
        "## Method",
        "",
        f"* Everything runs on loopback in one run: {s['trials']} trials of about "
        f"{s['seconds']:g} s per scenario and side, notary and baseline alternating (the "
        "order flips every trial) so both see the same machine noise. Only ratios against a "
        "baseline measured in the same run are comparable between runs.",
        f"* Load: `wrk` ({s['threads']} threads) with a Lua script that sends the legacy "
        "request (`POST /target/<host>+<port>`, body `fingerprint=<SHA-1>`) and counts status "
        "codes and `Cache-Status` values.",
        f"* **Cached, keep-alive**: {s['connections']} persistent connections against the "
        "notary (`--no-tls`, 1 worker, cache warmed by one probe first) and against the "
        "baseline, a trivial aiohttp+uvloop app (`bench/notary/trivial.py`) answering the same "
        "request with a body of the same size and the same `Cache-Status` header.",
        "* **Cached, new TLS connection per request** (what the legacy add-on does), two "
        "ways, each against the trivial app over TLS with the same RSA-2048 key and TLS "
        "settings as the baseline:",
        f"  * *session resumed*: wrk, {s['connections']} connections sending `Connection: "
        "close` over HTTPS. wrk reuses TLS sessions (the target's `s_server -www` statistics "
        "show resumed sessions), so this is a client with a session cache: an abbreviated "
        "handshake per request, no RSA signature. wrk's latency counts from the request "
        "write, after the handshake; the mean including it is connections / rate.",
        f"  * *full handshake*: {s.get('fetch_clients', 4)} concurrent `openssl s_time -new "
        "-www /target/<host>+<port>` clients (HTTP/1.0 `GET`, the legacy protocol's "
        "no-fingerprint form, also a cache hit), a full handshake with an RSA-2048 "
        "signature for every request and no session reuse: a client without a session "
        "cache. s_time reports no latencies; the mean is clients / rate. Every answer is "
        "checked to be at least the cached body's size.",
        f"* **Forced live probes**: a fingerprint the target does not have, so every request "
        f"is a miss and the notary probes the target (an `openssl s_server` with an RSA-2048 "
        f"certificate) and answers 409. Every request names a different host "
        f"(`p<thread>-<n>.site.test`, {s['distinct_hosts']} names per wrk thread, all mapped to "
        "127.0.0.1 by `--hosts-file`) so concurrent requests never share one probe; "
        f"{s['probe_connections']} keep-alive connections; the negative cache is off "
        "(`--negative-ttl 0`). The baseline is the target's raw handshake rate from "
        "`openssl s_time -connect ... -new` (one client, full handshakes), measured between "
        "the notary's trials; its rate divides the handshakes by the wall-clock time.",
        "* The notary's per-address rate limit is raised out of the way "
        f"(`--rate-limit {s['rate_limit']:g}`): all load comes from one address, which a real "
        "deployment would see as many clients. The limiter still runs on every request.",
        "",
    ]
    return "\n".join(lines)

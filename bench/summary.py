"""The closing summary of ``make bench``: every headline figure beside its goal.

Reads the results each suite just wrote (``var/results/`` or, when recording, the tracked
files; :mod:`bench.paths`). A figure without a stated goal is printed with ``-``. Missing or
unreadable files are reported, never fatal: the suites' own exit codes decide the status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.paths import results_path

Row = tuple[str, str, str, str]  # figure, value, goal, met


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _notary(d: dict[str, Any]) -> Iterator[Row]:
    for name, sc in d.get("scenarios", {}).items():
        cmp = sc.get("compare", {})
        target = cmp.get("target")
        yield (f"notary {name}: rate / {sc.get('baseline_title', 'baseline')}",
               _pct(cmp.get("ratio")), _pct(target) if target else "-",
               "-" if target is None else ("yes" if cmp.get("meets_target") else "NO"))
    for g in (d.get("probe_goals") or {}).get("goals", []):
        at_most = g.get("at_most", True)
        yield (f"notary probes {g['goal']}", _goal_fmt(g["value"], g.get("unit")),
               ("<= " if at_most else ">= ") + _goal_fmt(g["limit"], g.get("unit")),
               "yes" if g["met"] else "NO")
    for g in d.get("log_goals") or []:
        yield (f"notary {g['goal']}", _goal_fmt(g["value"], g.get("unit")),
               ("<= " if g.get("at_most") else ">= ") + _goal_fmt(g["limit"], g.get("unit")),
               "yes" if g["met"] else "NO")


def _goal_fmt(x: float, unit: str | None) -> str:
    return f"{x:,.0f} {unit}" if unit in ("us", "ms") else f"{x:.2f}"


def _notary_runs(d: dict[str, Any]) -> Iterator[Row]:
    for cond, c in (d.get("conditions") or {}).items():
        for f in (c.get("aggregate") or {}).values():
            if f.get("goal") is None:
                continue
            unit = "ms" if f["title"].endswith("(ms)") else None
            yield (f"notary, median of {len(f['runs'])} runs, {cond}: {f['title']}",
                   f"{_goal_fmt(f['median'], unit)} ({_goal_fmt(f['min'], unit)}-"
                   f"{_goal_fmt(f['max'], unit)})",
                   ("<= " if f["at_most"] else ">= ") + _goal_fmt(f["goal"], unit),
                   "yes" if f["met"] else "NO")
    tl = d.get("tlog") or {}
    rate = (tl.get("sequencing") or {}).get("sequence_entries_per_second")
    if rate is not None:
        yield ("tlog: sequencing entries/s on one core", f"{rate:,.0f}", ">= 10,000",
               "yes" if rate >= 10_000 else "NO")


def _client(d: dict[str, Any]) -> Iterator[Row]:
    p50 = ((d.get("cache") or {}).get("client_check") or {}).get("p50_us")
    yield ("client: local cache hit, p50", "-" if p50 is None else f"{p50:.1f} us",
           f"{d.get('target_cache_hit_p50_us')} us",
           "yes" if d.get("cache_hit_p50_under_target") else "NO")
    goal = d.get("goal_one_notary_over_raw_request")
    for k, v in (d.get("ratios") or {}).items():
        if goal is not None and k in ("one_notary_over_raw_request_paired",
                                      "one_notary_new_connection_over_raw_request_paired"):
            yield (f"client: {k}", f"{v:g}x", f"<= {goal:g}x", "yes" if v <= goal else "NO")
        else:
            yield (f"client: {k}", f"{v:g}x", "-", "-")


def _client_runs(d: dict[str, Any]) -> Iterator[Row]:
    goal = d.get("goal", 1.3)
    for client, doc in (("client", d), ("client-go", d.get("go") or {})):
        for group, scenario in (("quiet", ", quiet"), ("busy", ", busy")):
            runs = doc.get(group) or {}
            n = len(runs.get("runs", []))
            for key, title in (("check_over_bare_legacy_request", "check (kept connection)"),
                               ("check_new_connection_over_bare_legacy_request",
                                "check on a new connection")):
                s = runs.get(key)
                if s:
                    yield (f"{client}, median of {n} runs{scenario}: {title} / bare TLS "
                           "request", _spread(s, "{:.2f}x"), f"<= {goal:g}x",
                           "yes" if s["median"] <= goal else "NO")


def _client_go(d: dict[str, Any]) -> Iterator[Row]:
    paired, goal = d.get("paired_ratios_median") or {}, d.get("goal_paired_ratio")
    for key, title in (("extended", "check (kept connection)"),
                       ("extended-new-connection", "check on a new connection")):
        if key in paired and goal is not None:
            yield (f"client-go: {title} / bare TLS request, paired", f"{paired[key]:.2f}x",
                   f"<= {goal:g}x", "yes" if paired[key] <= goal else "NO")


def _extended(d: dict[str, Any]) -> Iterator[Row]:
    for k, v in (d.get("median_ratio_to_legacy") or {}).items():
        yield (f"extended {k}: rate / legacy", f"{v:.2f}x", "-", "-")


def _spread(s: dict[str, float] | None, pattern: str) -> str:
    if not s:
        return "-"
    return (f"{pattern.format(s['median'])} ({pattern.format(s['min'])}-"
            f"{pattern.format(s['max'])})")


def _replay_runs(d: dict[str, Any]) -> Iterator[Row]:
    goal = d["goal"]
    for cond, c in (d.get("conditions") or {}).items():
        n = d.get("runs_per_condition")
        rate, p99 = c.get("sustained_rate"), c.get("p99_ms_at_goal")
        yield (f"replay, median of {n} runs, {cond}: highest rate, every rate up to it with "
               f"send lateness p99 < {goal['p99_ms']:g} ms", _spread(rate, "{:,.0f}/s"),
               f">= {goal['rate']:,.0f}/s",
               "yes" if rate and rate["median"] >= goal["rate"] else "NO")
        yield (f"replay, median of {n} runs, {cond}: send lateness p99 at "
               f"{goal['rate']:,.0f}/s", _spread(p99, "{:.2f} ms"), f"< {goal['p99_ms']:g} ms",
               "yes" if p99 and p99["median"] < goal["p99_ms"] else "NO")


def _ingest_command(d: dict[str, Any]) -> Iterator[Row]:
    goals = d.get("goals") or {}
    limit = (goals.get("flows_per_cpu_s") or {}).get("limit", 1e6)
    rss = (goals.get("peak_rss_mb") or {}).get("limit", 1024)
    for name, v in (d.get("layouts") or {}).items():
        c = v["command"]
        yield (f"ingest, whole command, {name}: flows per CPU-second (median of "
               f"{len(c.get('trials', []))}, min-max CPU {c['cpu_min_s']:.2f}-"
               f"{c['cpu_max_s']:.2f} s)", f"{c['flows_per_cpu_s'] / 1e6:.2f} M",
               f">= {limit / 1e6:.2f} M", "yes" if c["flows_per_cpu_s"] >= limit else "NO")
        yield (f"ingest, whole command, {name}: peak RSS", f"{c['peak_rss_mb']:.0f} MB",
               f"<= {rss:.0f} MB", "yes" if c["peak_rss_mb"] <= rss else "NO")


def _ingest_runs(d: dict[str, Any]) -> Iterator[Row]:
    goal = d["goal"]
    n = d.get("runs_per_condition")
    for cond, c in (d.get("conditions") or {}).items():
        for name, v in c["layouts"].items():
            per = v["flows_per_cpu_s"]
            yield (f"ingest, whole command, median of {n} runs, {cond}, {name}: flows per "
                   "CPU-second", f"{per['median'] / 1e6:.2f} M ({per['min'] / 1e6:.2f}-"
                   f"{per['max'] / 1e6:.2f})", f">= {goal['flows_per_cpu_s'] / 1e6:.2f} M",
                   "yes" if per["median"] >= goal["flows_per_cpu_s"] else "NO")
            yield (f"ingest, whole command, {n} runs, {cond}, {name}: peak RSS",
                   f"{v['peak_rss_mb']:.0f} MB", f"<= {goal['peak_rss_mb']:.0f} MB",
                   "yes" if v["peak_rss_mb"] <= goal["peak_rss_mb"] else "NO")


def _rootstore(d: dict[str, Any]) -> Iterator[Row]:
    full = ((d.get("verification") or {}).get("full") or {}).get("ok") or {}
    if "us_per_chain_median" in full:
        yield ("rootstore: CA verification per chain (median)",
               f"{full['us_per_chain_median'] / 1000:.2f} ms", "-", "-")
    fp = d.get("forced_probes") or {}
    if "ratio_both_over_perspective_median" in fp:
        yield ("rootstore: probe rate, --verifier both / perspective",
               _pct(fp["ratio_both_over_perspective_median"]), "-", "-")


def _scale(d: dict[str, Any]) -> Iterator[Row]:
    for name, c in (d.get("configs") or {}).items():
        if "ratio_to_trivial" in c and name.startswith("cached/"):
            yield (f"scale {name}: rate / trivial app", _pct(c["ratio_to_trivial"]), "-", "-")
    mo = d.get("metrics_overhead") or {}
    if "ratio_on_to_off" in mo:
        yield ("scale: rate with metrics on / off", f"{mo['ratio_on_to_off']:.2f}x", "-", "-")


def _ingest(d: dict[str, Any]) -> Iterator[Row]:
    goals = d.get("goals") or {}
    for name, v in (d.get("layouts") or {}).items():
        fps = v["flows_per_s_one_core"]
        yield (f"ingest {name}: flows/s on one core", f"{fps / 1e6:.2f} M",
               ">= 1.00 M", "yes" if fps >= goals.get("flows_per_s_one_core", {}).get(
                   "limit", 1e6) else "NO")
        yield (f"ingest {name}: time / plain read+sort", f"{v['ratio_to_plain']:.2f}x",
               "<= 1.50x", "yes" if v["ratio_to_plain"] <= 1.5 else "NO")
    canon = (d.get("layouts") or {}).get("canonical")
    if canon:
        yield ("ingest: peak RSS, synthetic hour", f"{canon['peak_rss_mb']:.0f} MB",
               "< 500 MB", "yes" if canon["peak_rss_mb"] < 500 else "NO")
    two = d.get("two_cores") or {}
    if "speedup" in two:
        yield ("ingest: 2 cores / 1 core", f"{two['speedup']:.2f}x", "-", "-")
    big = d.get("big")
    if big:
        yield (f"ingest: peak RSS, {big['flows'] / 1e6:.0f} M flows",
               f"{big['peak_rss_mb']:.0f} MB", "< 2048 MB", "yes" if big["met"] else "NO")


def _syscalls(d: dict[str, Any]) -> Iterator[Row]:
    for side in ("log", "no_log"):
        if side in d:
            yield (f"notary: system calls per forced probe, {side.replace('_', ' ')}",
                   f"{d[side]['total_per_probe']:.0f}", "-", "-")


SOURCES: list[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]]] = [
    ("bench/results/notary.json", _notary),
    ("bench/results/notary-runs.json", _notary_runs),
    ("bench/results/notary-syscalls.json", _syscalls),
    ("bench/results/client.json", _client),
    ("bench/results/client-runs.json", _client_runs),
    ("client-libs/go/bench-results.json", _client_go),
    ("bench/results/extended.json", _extended),
    ("bench/results/replay-runs.json", _replay_runs),
    ("bench/results/ingest-command.json", _ingest_command),
    ("bench/results/ingest-runs.json", _ingest_runs),
    ("bench/results/rootstore.json", _rootstore),
    ("bench/results/scale.json", _scale),
    ("bench/results/ingest.json", _ingest),
]


def rows(ran: set[str] | None = None) -> list[Row]:
    out: list[Row] = []
    for rel, extract in SOURCES:
        path: Path = results_path(rel)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out.append((f"{rel}: no results", "-", "-", "-"))
            continue
        try:
            out.extend(extract(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            out.append((f"{rel}: unreadable ({exc})", "-", "-", "-"))
    return out


def render(table: list[Row]) -> str:
    w = max([len(r[0]) for r in table] + [6])
    lines = [f"{'figure':<{w}}  {'value':>12}  {'goal':>8}  met"]
    lines += [f"{f:<{w}}  {v:>12}  {g:>8}  {m}" for f, v, g, m in table]
    return "\n".join(lines)


__all__ = ["render", "rows"]

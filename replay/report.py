"""Offline reports from a results file: the study's tables (Markdown and CSV) and figures
(PNG, matplotlib with the Agg backend), side by side with the study's numbers."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replay.aggregate import (
    LAYERS,
    RESULT_COLUMNS,
    STUDY_FIGURES,
    STUDY_TABLE1,
    STUDY_TABLE2,
    STUDY_TABLE3,
    Aggregate,
    ResultRow,
    bin_width,
    binned,
    bins,
    min_hold,
)
from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.ingest import ErrorLog
from replay.sidebyside import INPUT, MEASURED, MODEL, Row, Table, input_rows, markdown, pct, text

OUTCOME_LABELS = {
    "200": "Notary: 200 (fingerprint confirmed)",
    "409": "Notary: 409 (fingerprint mismatch)",
    "503": "Notary: 503 Service Unavailable",
    "other-http": "Notary: other HTTP status",
    "connection-error": "Client-notary connection error",
    "client-timeout": "Client timeout",
    "not-sent": "Not sent (replayer in-flight bound)",
}
LAYER_LABELS = {"client": "Client: cached domain", "notary-hit": "Notary: cached domain",
                "notary-miss": "Cache miss (notary probed the site)"}


def read_results(path: Path, errors: ErrorLog | None = None) -> Iterator[ResultRow]:
    errors = errors or ErrorLog(strict=True)
    try:
        fh = path.open("r", encoding="utf-8", newline="")
    except OSError as exc:
        raise ReplayIOError(f"cannot open {path}: {exc}") from exc
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(header) != RESULT_COLUMNS:
            raise ReplayInputError(f"{path}: not a results file")
        for row in reader:
            if not row:
                continue
            try:
                yield ResultRow.from_row(row)
            except ValueError as exc:
                errors.add(MalformedRow(str(path), reader.line_num, str(exc)))


def _run_speed(results: Path) -> float:
    """The replay's speed factor from ``<results>.summary.json`` (1.0 if unknown)."""
    try:
        data = json.loads(results.with_name(results.name + ".summary.json").read_text())
        speed = float(data.get("speed", 1.0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 1.0
    return speed if speed > 0 else 1.0


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _stage_rows(stages: dict[str, Any], synth: dict[str, Any] | None,
                span_trace: float) -> list[Row]:
    """The trace stages beside the study's (section 3.1)."""
    syn = bool(synth)
    kept = int(stages.get("kept", 0) or 0)
    named = int(stages.get("named", 0) or 0)
    reqs = int(stages.get("notary_requests", 0) or 0)
    hits = int(stages.get("client_cache_hits", 0) or 0)
    sf = STUDY_FIGURES
    derived_hits = sf["named_flows"] - sf["notary_requests"]
    cfg = synth.get("config", {}) if synth and isinstance(synth.get("config"), dict) else {}
    factor = float(cfg.get("scale", 1.0)) * float(cfg.get("duration", 3600.0)) / 3600.0

    def scaled(n: float) -> str:
        """The study's count scaled to this trace's size, for counts (not shares)."""
        if not syn or abs(factor - 1.0) < 1e-9:
            return ""
        return (f"the study's count scaled to this trace (scale {cfg.get('scale')}, "
                f"{float(cfg.get('duration', 0)):.0f} s): {n * factor:,.0f}")

    rows = [
        Row("flows kept (TCP/443)", f"{kept:,}", f"{sf['flows']:,}", "yes",
            INPUT if syn else MEASURED, scaled(sf["flows"])),
        Row("one-way flows paired (both directions of a connection)",
            f"{int(stages.get('paired', 0) or 0):,}", "-", "-", MEASURED,
            f"{int(stages.get('reverse_only', 0) or 0):,} server halves had no partner"),
        Row("named share of kept flows", pct(named / kept if kept else None),
            pct(sf["named_flows"] / sf["flows"]), "yes", INPUT if syn else MEASURED,
            "unnamed_share input" if syn else ""),
        Row("client-cache hits", f"{hits:,}", f"{derived_hits:,}", "yes", MODEL if syn
            else MEASURED, f"study: named flows - notary requests = {derived_hits:,}; its "
            f"Table 2 reports {STUDY_TABLE2['client'][0]:,} client-cache hits "
            f"({STUDY_TABLE2['client'][0] - derived_hits:,} more) without saying why"),
        Row("notary requests", f"{reqs:,}", f"{sf['notary_requests']:,}", "yes",
            MODEL if syn else MEASURED, scaled(sf["notary_requests"])),
        Row("notary requests / named flows", pct(reqs / named if named else None),
            pct(sf["notary_requests"] / sf["named_flows"]), "yes", MODEL if syn else MEASURED,
            "what the per-client cache leaves for the notary"),
        Row("named flows per second (trace time)",
            f"{named / span_trace:.1f}" if span_trace else "-",
            f"{sf['mean_validations_per_s']}", "yes", INPUT if syn else MEASURED,
            f"named_flow_rate input x scale {cfg.get('scale')}" if syn else ""),
        Row("malformed rows skipped", f"{int(stages.get('malformed', 0) or 0):,}", "-", "-",
            MEASURED),
    ]
    return rows


def build_report(results: Path, out_dir: Path, stages: dict[str, Any] | None = None,
                 plots: bool = True, errors: ErrorLog | None = None,
                 synth: dict[str, Any] | None = None) -> dict[str, Any]:
    """Aggregate ``results`` and write report.md, table*.csv, figure*.png, report.json.

    ``stages``: the workload's stage counters; ``synth``: the ``synth.json`` of a synthetic
    trace (its inputs are listed and the rows they decide are marked as inputs).
    ``summary["text"]`` holds the side-by-side tables as plain text for a terminal."""
    agg = Aggregate().extend(read_results(results, errors))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplayIOError(f"cannot create {out_dir}: {exc}") from exc
    syn = bool(synth)
    speed = _run_speed(results)

    t1 = agg.table1()
    _write_csv(out_dir / "table1.csv", ["outcome", "count", "share", "study_count",
                                        "study_share"],
               [[o, n, f"{s:.6f}", STUDY_TABLE1.get(o, ("", ""))[0],
                 STUDY_TABLE1.get(o, ("", ""))[1]] for o, n, s in t1])
    notes1 = {"200": "the study's 202 (its notary's success code)",
              "409": "the study had no 409 row (no forged or rotating sites)",
              "503": ("decided by dead_visit_share (input)" if syn else ""),
              "connection-error": "between the replayer and the notary",
              "not-sent": "the replayer's own in-flight bound; never a notary failure"}
    t1_rows = []
    for o, n, share in t1:
        study = STUDY_TABLE1.get(o)
        t1_rows.append(Row(OUTCOME_LABELS[o], f"{n:,} ({_pct(share)})",
                           f"{study[0]:,} ({_pct(study[1])})" if study else "-",
                           "yes", INPUT if (syn and o == "503") else MEASURED,
                           notes1.get(o, "")))

    t2 = agg.table2()
    _write_csv(out_dir / "table2.csv", ["layer", "count", "share", "study_count",
                                        "study_share"],
               [[k, n, f"{s:.6f}", STUDY_TABLE2[k][0], STUDY_TABLE2[k][1]] for k, n, s in t2])
    t2_rows = [Row(LAYER_LABELS[k], f"{n:,} ({_pct(s)})",
                   f"{STUDY_TABLE2[k][0]:,} ({_pct(STUDY_TABLE2[k][1])})", "yes",
                   MODEL if syn else MEASURED,
                   "successful validations only (client hits + 200/409)" if k == "client"
                   else "") for k, n, s in t2]

    span = agg.span()
    hold = min_hold(span, speed)
    t3 = agg.table3(speed=speed)
    _write_csv(out_dir / "table3.csv", ["level", "seconds", "trace_seconds", "study_seconds",
                                        "min_hold_seconds"],
               [[level, "" if sec is None else sec, "" if sec is None else sec * speed,
                 STUDY_TABLE3[level], f"{hold:.0f}"] for level, sec in t3])
    t3_rows = [Row(f"{int(level * 100)}% notary-cache utilisation",
                   "not held" if sec is None else
                   (f"{sec} s" + (f" ({sec * speed:.0f} s of trace)" if speed != 1 else "")),
                   f"{STUDY_TABLE3[level]} s", "approx.", MODEL if syn else MEASURED,
                   "") for level, sec in t3]
    rule = (f"Rule: a level counts from the first second after which every second's notary "
            f"hit ratio stays at or above it (the study's definition) and only if the run "
            f"then lasts at least {hold:.0f} s more (10% of the run and 60 s of trace "
            f"time); otherwise 'not held'. The study's rule alone is met trivially in a run's "
            f"last seconds.")
    ratios = agg.hit_ratio_per_s()
    verdicts = sum(agg.layers[k] for k in ("notary-hit", "notary-miss"))
    per_second = verdicts / len(ratios) if ratios else 0.0
    if per_second < 20:
        rule += (f" This run had {per_second:.1f} notary verdicts per second with one: a single "
                 f"miss in a second drops it below every level, so the levels are mostly noise "
                 f"here (the study had ~{STUDY_FIGURES['mean_requests_per_s']}); use a larger "
                 f"--scale for Table 3.")

    lat_rows = []
    for cond in ("notary-hit", "notary-miss", "error", "unknown", "all"):
        h = agg.latency.get(cond)
        if h is None or h.n == 0:
            continue
        lat_rows.append([cond, h.n, f"{h.mean * 1000:.1f}", f"{h.quantile(0.5) * 1000:.1f}",
                         f"{h.quantile(0.9) * 1000:.1f}", f"{h.quantile(0.99) * 1000:.1f}",
                         f"{h.quantile(0.999) * 1000:.1f}", f"{h.max * 1000:.1f}"])
    lat_header = ["condition", "n", "mean ms", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
                  "max ms"]
    _write_csv(out_dir / "latency.csv", lat_header, lat_rows)
    _write_csv(out_dir / "per-site.csv", ["host", "port", "requests", "perspective_accepts",
                                          "mismatches"],
               [[h, p, *counts] for (h, p), counts in sorted(agg.per_site.items())])
    perf_rows = []
    for cond, study_key, label in (("notary-hit", "hit_latency_s", "latency, notary cache hit"),
                                   ("notary-miss", "miss_latency_s",
                                    "latency, notary cache miss")):
        h = agg.latency.get(cond)
        perf_rows.append(Row(
            label, "-" if h is None or not h.n else
            f"mean {h.mean * 1000:.0f} ms, p50 {h.quantile(0.5) * 1000:.0f} ms",
            f"~{STUDY_FIGURES[study_key] * 1000:.0f} ms", "no", MEASURED,
            "ours: notary, target and replayer on one loopback host; the study: a "
            "Convergence 0.4 notary on a LAN, probing the internet"))

    ssl_total = None
    if stages and isinstance(stages.get("ssl_bytes_kept"), int):
        ssl_total = int(stages["ssl_bytes_kept"])
    overhead = agg.overhead(ssl_total)
    mean_rate = agg.requests / span if span else 0.0
    cfg = synth.get("config", {}) if synth and isinstance(synth.get("config"), dict) else {}
    expected_rate = ""
    if "scale" in cfg:
        rate = STUDY_FIGURES["mean_requests_per_s"] * float(cfg["scale"]) * speed
        expected_rate = f"; the study's rate at this trace's scale and speed: {rate:.1f}"
    perf_rows.insert(0, Row("notary requests per second", f"{mean_rate:.1f}"
                            + (f" (replayed at x{speed:g})" if speed != 1 else ""),
                            f"{STUDY_FIGURES['mean_requests_per_s']}", "yes",
                            MODEL if syn else MEASURED, "per second of replay" + expected_rate))
    perf_rows.append(Row(
        "network overhead (notary bytes / SSL bytes)",
        f"{overhead * 100:.4f}%" if overhead is not None else "n/a",
        f"{STUDY_FIGURES['overhead'] * 100:.2f}%", "no",
        f"{MEASURED}; denominator {INPUT}" if syn else MEASURED,
        "ours: HTTP request and response bytes between replayer and notary (no TCP/IP or "
        "TLS framing, no probe traffic) / bytes of the kept flows; the study: every frame "
        "on port 443 captured with tcpdump at the notary (framing and the notary's own "
        "probes included) / SSL bytes estimated from NetFlow rates"
        + ("; the flow bytes are the mean_flow_bytes input" if syn else "")))

    tables = [Table("Table 1: notary requests by outcome", tuple(t1_rows)),
              Table("Table 2: successful validations by cache layer", tuple(t2_rows)),
              Table("Table 3: time to reach notary-cache utilisation levels", tuple(t3_rows),
                    footnote=rule),
              Table("Performance and overhead", tuple(perf_rows))]
    if stages:
        tables.insert(0, Table("Trace stages (section 3.1)", tuple(_stage_rows(
            stages, synth, float(stages.get("trace_seconds", 0) or 0) or span * speed))))

    summary: dict[str, Any] = {
        "requests": agg.requests, "client_hits": agg.client_hits,
        "outcomes": dict(agg.outcomes), "errors": dict(agg.errors),
        "layers": dict(agg.layers), "unknown_layer_verdicts": agg.unknown_layer_verdicts,
        "time_to_level": {f"{lv:.2f}": s for lv, s in t3}, "min_hold_seconds": hold,
        "speed": speed, "notary_bytes": agg.notary_bytes,
        "ssl_bytes": ssl_total if ssl_total is not None else agg.ssl_bytes,
        "overhead": overhead, "span_seconds": span, "mean_requests_per_s": mean_rate,
        "lateness_p50_ms": agg.lateness.quantile(0.5) * 1000,
        "lateness_p99_ms": agg.lateness.quantile(0.99) * 1000,
        "lateness_max_ms": agg.lateness.max * 1000,
        "wire_lateness_p50_ms": agg.wire_lateness.quantile(0.5) * 1000,
        "wire_lateness_p99_ms": agg.wire_lateness.quantile(0.99) * 1000,
        "latency_ms": {c: {"n": h.n, "mean": h.mean * 1000, "p50": h.quantile(0.5) * 1000,
                           "p99": h.quantile(0.99) * 1000}
                       for c, h in agg.latency.items() if h.n},
        "notaries": dict(agg.notaries), "stages": stages or {},
        "inputs": input_rows(synth),
        "tables": [{"title": t.title, "rows": [r.cells() for r in t.rows],
                    "footnote": t.footnote} for t in tables],
    }
    (out_dir / "report.json").write_text(json.dumps(summary, indent=2) + "\n",
                                         encoding="utf-8")

    figures = _plots(agg, out_dir, speed) if plots else []

    md = ["# Replay report", "",
          f"Results: `{results}`; {agg.requests:,} notary requests and "
          f"{agg.client_hits:,} client-cache hits over {span} s of replay"
          + (f" (speed x{speed:g}: {span * speed:.0f} s of trace)" if speed != 1 else "")
          + ".", ""]
    inputs = input_rows(synth)
    if inputs:
        md += ["## Inputs of the synthetic trace", "",
               "These are generator parameters, not findings. Rows of the tables below that "
               "they decide are marked `input (calibrated to the study)`; rows shaped by "
               "parameters chosen by hand and not fitted are marked `model (not fitted)`.", "",
               _md_table(["parameter", "value", "what", "basis"], inputs), ""]
    else:
        md += ["Every row below is measured from the trace and the replay.", ""]
    md += ["## The study's tables, side by side", ""]
    md += [markdown(t) + "\n" for t in tables]
    md += ["## Latency", "",
           _md_table(lat_header, [[r[0], f"{r[1]:,}", *r[2:]] for r in lat_rows]), "",
           "## Send lateness (open-loop schedule)", "",
           f"p50 {summary['lateness_p50_ms']:.2f} ms, p99 {summary['lateness_p99_ms']:.2f} ms, "
           f"max {summary['lateness_max_ms']:.2f} ms (dispatch); on the wire (request headers "
           f"written, including any wait for a pooled connection): p50 "
           f"{summary['wire_lateness_p50_ms']:.2f} ms, "
           f"p99 {summary['wire_lateness_p99_ms']:.2f} ms.", ""]
    if agg.unknown_layer_verdicts:
        md += [f"{agg.unknown_layer_verdicts:,} verdicts carried no recognised "
               "`Cache-Status` and are left out of Table 2.", ""]
    if figures:
        md += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    (out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")
    summary["figures"] = figures
    summary["text"] = "\n\n".join(text(t) for t in tables)
    return summary


def _plots(agg: Aggregate, out_dir: Path, speed: float = 1.0) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = agg.span()
    width = bin_width(span)
    unit = "minutes" if width == 60 else "seconds"
    xs = [i * width / (60 if width == 60 else 1) for i in range(bins(span, width))]
    xlabel = f"Replay time ({unit}, {width} s bins)" + (
        f"; trace time = replay time x {speed:g}" if speed != 1 else " = trace time")
    names = []

    def finish(fig: Any, ax: Any, title: str, ylabel: str, name: str) -> None:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        # below the axes, so that no line is hidden behind it
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, fontsize="small",
                  frameon=False)
        fig.savefig(out_dir / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        names.append(name)

    fig, ax = plt.subplots(figsize=(8, 4.8))
    series = [[v / width for v in binned(s, width, span)]
              for s in (agg.validations_per_s, agg.scheduled_per_s, agg.sent_per_s)]
    peak = max((max(s, default=0.0) for s in series), default=0.0) or 1.0
    coincide = all(abs(a - b) <= 0.01 * peak for a, b in zip(series[1], series[2],
                                                               strict=True))
    ax.plot(xs, series[0], color="tab:gray", label="Validations in trace (before client cache)")
    ax.plot(xs, series[1], color="tab:blue", linewidth=3, alpha=0.6,
            label="Notary requests scheduled")
    ax.plot(xs, series[2], color="tab:orange", linestyle="--", marker="." if len(xs) < 80
            else None, label="Notary requests generated" + (
                " (coincides with scheduled: the open loop kept to it)" if coincide else ""))
    finish(fig, ax, "Figure 2: requests per second, scheduled vs generated",
           "Requests per second", "figure2-requests.png")

    fig, ax = plt.subplots(figsize=(8, 4.8))
    groups = {"Notary success (200/409)": ("200", "409"), "Notary failure (503/other)":
              ("503", "other-http"), "Dropped connection / timeout":
              ("connection-error", "client-timeout")}
    for label, keys in groups.items():
        per_s: dict[int, int] = {}
        for (s, o), n in agg.outcome_per_s.items():
            if o in keys:
                per_s[s] = per_s.get(s, 0) + n
        ax.plot(xs, [v / width for v in binned(per_s, width, span)], label=label)
    finish(fig, ax, "Figure 3: notary performance against the workload",
           "Responses per second", "figure3-outcomes.png")

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for layer in LAYERS:
        per_s = {s: n for (s, lay), n in agg.layer_per_s.items() if lay == layer}
        ax.plot(xs, [v / width for v in binned(per_s, width, span)], label=LAYER_LABELS[layer])
    finish(fig, ax, "Figure 4: cache hits by layer", "Responses per second",
           "figure4-cache-layers.png")

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for cond, label in (("notary-hit", "Cache hit (notary)"), ("notary-miss",
                        "Cache miss (notary)"), ("error", "Error (notary)")):
        sums = {s: v for (s, c), v in agg.delay_sum_per_s.items() if c == cond}
        counts = {s: v for (s, c), v in agg.delay_sum_per_s.items() if c == "n:" + cond}
        bs, bc = binned(sums, width, span), binned(counts, width, span)
        # markers: a bin between two empty ones is still seen
        ax.plot(xs, [s / c if c and s > 0 else float("nan") for s, c in zip(bs, bc,
                                                                              strict=True)],
                marker=".", markersize=4, label=label)
    # hits take milliseconds and misses up to the probe timeout: a log axis shows both
    ax.set_yscale("log")
    finish(fig, ax, "Figure 5: delay by cache condition (log scale)",
           "Average delay per request (s)", "figure5-delay.png")
    return names

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
)
from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.ingest import ErrorLog

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


def build_report(results: Path, out_dir: Path, stages: dict[str, Any] | None = None,
                 plots: bool = True, errors: ErrorLog | None = None) -> dict[str, Any]:
    """Aggregate ``results`` and write report.md, table*.csv, figure*.png, report.json."""
    agg = Aggregate().extend(read_results(results, errors))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplayIOError(f"cannot create {out_dir}: {exc}") from exc

    t1 = agg.table1()
    t1_rows = []
    for o, n, share in t1:
        study = STUDY_TABLE1.get(o)
        t1_rows.append([OUTCOME_LABELS[o], f"{n:,}", _pct(share),
                        f"{study[0]:,}" if study else "-", _pct(study[1]) if study else "-"])
    _write_csv(out_dir / "table1.csv", ["outcome", "count", "share", "study_count",
                                        "study_share"],
               [[o, n, f"{s:.6f}", STUDY_TABLE1.get(o, ("", ""))[0],
                 STUDY_TABLE1.get(o, ("", ""))[1]] for o, n, s in t1])

    t2 = agg.table2()
    t2_rows = [[LAYER_LABELS[k], f"{n:,}", _pct(s), f"{STUDY_TABLE2[k][0]:,}",
                _pct(STUDY_TABLE2[k][1])] for k, n, s in t2]
    _write_csv(out_dir / "table2.csv", ["layer", "count", "share", "study_count",
                                        "study_share"],
               [[k, n, f"{s:.6f}", STUDY_TABLE2[k][0], STUDY_TABLE2[k][1]] for k, n, s in t2])

    speed = _run_speed(results)
    t3 = agg.table3()
    t3_rows = [[f"{int(level * 100)}%", "never held" if sec is None else f"{sec} s",
                "-" if sec is None else f"{sec * speed:.0f} s",
                f"{STUDY_TABLE3[level]} s"] for level, sec in t3]
    _write_csv(out_dir / "table3.csv", ["level", "seconds", "study_seconds"],
               [[level, "" if sec is None else sec, STUDY_TABLE3[level]] for level, sec in t3])

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

    ssl_total = None
    if stages and isinstance(stages.get("ssl_bytes_kept"), int):
        ssl_total = int(stages["ssl_bytes_kept"])
    overhead = agg.overhead(ssl_total)
    span = agg.span()
    mean_rate = agg.requests / span if span else 0.0

    summary: dict[str, Any] = {
        "requests": agg.requests, "client_hits": agg.client_hits,
        "outcomes": dict(agg.outcomes), "errors": dict(agg.errors),
        "layers": dict(agg.layers), "unknown_layer_verdicts": agg.unknown_layer_verdicts,
        "time_to_level": {f"{lv:.2f}": s for lv, s in t3}, "speed": speed,
        "notary_bytes": agg.notary_bytes,
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
    }
    (out_dir / "report.json").write_text(json.dumps(summary, indent=2) + "\n",
                                         encoding="utf-8")

    figures = _plots(agg, out_dir) if plots else []

    md = ["# Replay report", "",
          f"Results: `{results}`; {agg.requests:,} notary requests and "
          f"{agg.client_hits:,} client-cache hits over {span} s "
          f"({mean_rate:.1f} notary requests/s; study: "
          f"{STUDY_FIGURES['mean_requests_per_s']}/s).", ""]
    if stages:
        md += ["## Trace stages", "",
               _md_table(["stage", "count", "study"], [
                   ["flows kept (TCP/443)", f"{stages.get('kept', 0):,}",
                    f"{STUDY_FIGURES['flows']:,}"],
                   ["named", f"{stages.get('named', 0):,}", f"{STUDY_FIGURES['named_flows']:,}"],
                   ["unnamed (dropped)", f"{stages.get('unnamed_dropped', 0):,}", "1,783,335"],
                   ["client-cache hits", f"{stages.get('client_cache_hits', 0):,}", "1,565,554"],
                   ["notary requests", f"{stages.get('notary_requests', 0):,}",
                    f"{STUDY_FIGURES['notary_requests']:,}"],
                   ["malformed rows skipped", f"{stages.get('malformed', 0):,}", "-"],
               ]), ""]
    md += ["## Table 1: notary requests by outcome", "",
           _md_table(["outcome", "count", "share", "study count", "study share"], t1_rows), "",
           "## Table 2: cache use by layer (successful validations)", "",
           _md_table(["layer", "count", "share", "study count", "study share"], t2_rows), ""]
    if agg.unknown_layer_verdicts:
        md += [f"{agg.unknown_layer_verdicts:,} verdicts carried no recognised "
               "`Cache-Status` and are left out of Table 2.", ""]
    md += ["## Table 3: time to reach notary-cache utilisation levels", "",
           _md_table(["utilisation", "reached after (replay time)",
                      f"in trace time (x{speed:g})", "study"], t3_rows), "",
           "## Latency", "",
           _md_table(lat_header, [[r[0], f"{r[1]:,}", *r[2:]] for r in lat_rows]), "",
           f"Study: notary cache miss ~{STUDY_FIGURES['miss_latency_s']} s, hit "
           f"~{STUDY_FIGURES['hit_latency_s']} s.", "",
           "## Send lateness (open-loop schedule)", "",
           f"p50 {summary['lateness_p50_ms']:.2f} ms, p99 {summary['lateness_p99_ms']:.2f} ms, "
           f"max {summary['lateness_max_ms']:.2f} ms (dispatch); on the wire (request headers "
           f"written, including any wait for a pooled connection): p50 "
           f"{summary['wire_lateness_p50_ms']:.2f} ms, "
           f"p99 {summary['wire_lateness_p99_ms']:.2f} ms.",
           "",
           "## Network overhead", "",
           f"Notary bytes (HTTP level) {agg.notary_bytes:,} / SSL bytes "
           f"{summary['ssl_bytes']:,} = "
           + (f"{overhead * 100:.4f}%" if overhead is not None else "n/a")
           + f" (study: {STUDY_FIGURES['overhead'] * 100:.2f}%).", ""]
    if figures:
        md += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    (out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")
    summary["figures"] = figures
    return summary


def _plots(agg: Aggregate, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = agg.span()
    width = bin_width(span)
    unit = "minutes" if width == 60 else "seconds"
    xs = [i * width / (60 if width == 60 else 1) for i in range(bins(span, width))]
    names = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        names.append(name)

    fig, ax = plt.subplots(figsize=(8, 4))
    for series, label in ((agg.validations_per_s, "Validations in trace (before client cache)"),
                          (agg.scheduled_per_s, "Notary requests scheduled"),
                          (agg.sent_per_s, "Notary requests generated")):
        ax.plot(xs, [v / width for v in binned(series, width, span)], label=label)
    ax.set_xlabel(f"Time ({unit})")
    ax.set_ylabel("Requests per second")
    ax.set_title("Figure 2: requests per second, scheduled vs generated")
    ax.legend()
    save(fig, "figure2-requests.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    groups = {"Notary success (200/409)": ("200", "409"), "Notary failure (503/other)":
              ("503", "other-http"), "Dropped connection / timeout":
              ("connection-error", "client-timeout")}
    for label, keys in groups.items():
        per_s: dict[int, int] = {}
        for (s, o), n in agg.outcome_per_s.items():
            if o in keys:
                per_s[s] = per_s.get(s, 0) + n
        ax.plot(xs, [v / width for v in binned(per_s, width, span)], label=label)
    ax.set_xlabel(f"Time ({unit})")
    ax.set_ylabel("Responses per second")
    ax.set_title("Figure 3: notary performance against the workload")
    ax.legend()
    save(fig, "figure3-outcomes.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    for layer in LAYERS:
        per_s = {s: n for (s, lay), n in agg.layer_per_s.items() if lay == layer}
        ax.plot(xs, [v / width for v in binned(per_s, width, span)], label=LAYER_LABELS[layer])
    ax.set_xlabel(f"Time ({unit})")
    ax.set_ylabel("Responses per second")
    ax.set_title("Figure 4: cache hits by layer")
    ax.legend()
    save(fig, "figure4-cache-layers.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    for cond, label in (("notary-hit", "Cache hit (notary)"), ("notary-miss",
                        "Cache miss (notary)"), ("error", "Error (notary)")):
        sums = {s: v for (s, c), v in agg.delay_sum_per_s.items() if c == cond}
        counts = {s: v for (s, c), v in agg.delay_sum_per_s.items() if c == "n:" + cond}
        bs, bc = binned(sums, width, span), binned(counts, width, span)
        ax.plot(xs, [s / c if c else float("nan") for s, c in zip(bs, bc, strict=True)],
                label=label)
    ax.set_xlabel(f"Time ({unit})")
    ax.set_ylabel("Average delay per request (s)")
    ax.set_title("Figure 5: delay by cache condition")
    ax.legend()
    save(fig, "figure5-delay.png")
    return names

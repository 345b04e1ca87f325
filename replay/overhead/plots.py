"""The thesis's figures drawn from our samples (matplotlib, the ``replay`` extra's): the CDFs
of the overhead in ms and in % of the http time, one line per profile and TLS variant, one
panel per connection mode, and the overhead against the http time; the thesis's reference
points (non-persistent: median ~200 ms and ~20%, 75th percentile ~350 ms, 90th ~1.1 s;
persistent: median ~90 ms and ~15%) marked on them. PNG files next to ``overhead.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FILES = {"cdf_ms": "overhead-cdf-ms.png", "cdf_pct": "overhead-cdf-pct.png",
         "vs_http": "overhead-vs-http.png"}
CONNS = ("non-persistent", "persistent")
# the thesis's reference points: (overhead, cumulative fraction) per connection mode
REF_MS = {"non-persistent": ((200.0, 0.5, "median ~200 ms"), (350.0, 0.75, "75th ~350 ms"),
                             (1100.0, 0.9, "90th ~1.1 s")),
          "persistent": ((90.0, 0.5, "median ~90 ms"),)}
REF_PCT = {"non-persistent": ((20.0, 0.5, "median ~20%"),),
           "persistent": ((15.0, 0.5, "median ~15%"),)}
STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))


def _samples(doc: dict[str, Any]) -> dict[tuple[str, str, str], tuple[list[float],
                                                                          list[float]]]:
    """(profile, connection mode, variant) -> (http s, https s), where the samples are."""
    out = {}
    for prof, by_conn in doc.get("results", {}).items():
        for conn in CONNS:
            for label, s in by_conn.get(conn, {}).items():
                if not label.startswith("_") and s.get("http_s") and s.get("https_s"):
                    out[(prof, conn, label)] = (list(s["http_s"]), list(s["https_s"]))
    return out


def _cdf(xs: list[float]) -> tuple[list[float], list[float]]:
    ys = sorted(xs)
    return [ys[0], *ys], [0.0, *((i + 1) / len(ys) for i in range(len(ys)))]


def write_plots(out: Path, doc: dict[str, Any]) -> dict[str, int]:
    """Draw the figures under ``out``: {file name: lines and points of ours drawn}. Nothing
    is drawn (and {} returned) when the document has no per-load samples (a recorded one)."""
    data = _samples(doc)
    if not data:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = sorted({p for p, _, _ in data})
    variants = sorted({v for _, _, v in data})
    colours = {p: f"C{i % 10}" for i, p in enumerate(profiles)}
    styles = {v: STYLES[i % len(STYLES)] for i, v in enumerate(variants)}
    drawn: dict[str, int] = {}

    for key, unit, refs in (("cdf_ms", "ms", REF_MS), ("cdf_pct", "%", REF_PCT)):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        n = 0
        for ax, conn in zip(axes, CONNS, strict=True):
            for (prof, c, label), (h, s) in sorted(data.items()):
                if c != conn:
                    continue
                d = [(b - a) * 1000 if unit == "ms" else (b - a) / a * 100
                     for a, b in zip(h, s, strict=True)]
                xs, ys = _cdf(d)
                ax.step(xs, ys, where="post", color=colours[prof], linestyle=styles[label],
                        label=f"{prof} path, {label}")
                n += 1
            for x, y, text in refs[conn]:
                ax.plot([x], [y], marker="X", markersize=11, color="black", zorder=5)
                ax.annotate(f"thesis {text}", (x, y), textcoords="offset points",
                            xytext=(6, -12), fontsize=8)
            ax.set_xscale("symlog", linthresh=10.0 if unit == "ms" else 1.0)
            ax.set_xlabel(f"https - http ({unit})")
            ax.set_title(f"{conn} connections")
            ax.set_ylim(0.0, 1.02)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("cumulative fraction of page loads")
        axes[1].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"CDF of the HTTPS overhead in {unit} (ours: lines; the 2015 thesis: X)")
        fig.tight_layout()
        fig.savefig(out / FILES[key], dpi=90)
        plt.close(fig)
        drawn[FILES[key]] = n

    fig, ax = plt.subplots(figsize=(8, 5.5))
    n = 0
    for (prof, conn, label), (h, s) in sorted(data.items()):
        if label != "tls1.2":
            continue
        ax.scatter([a * 1000 for a in h], [(b - a) * 1000 for a, b in zip(h, s, strict=True)],
                   color=colours[prof], marker="o" if conn == "non-persistent" else "^",
                   s=18, label=f"{prof} path, {conn}")
        n += len(h)
    ax.plot([2720.0], [436.0], marker="X", markersize=12, color="black", zorder=5)
    ax.annotate("thesis: mean 2.72 s http, +436 ms", (2720.0, 436.0),
                textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.axhline(200.0, color="black", linewidth=0.8, linestyle=":")
    ax.annotate("thesis: median overhead ~200 ms, about the same at any http time",
                (0.0, 200.0), xycoords=("axes fraction", "data"), textcoords="offset points",
                xytext=(4, 4), fontsize=8)
    ax.set_xlabel("http page download time (ms)")
    ax.set_ylabel("https - http (ms)")
    ax.set_title("HTTPS overhead against the page's http time (TLS 1.2)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / FILES["vs_http"], dpi=90)
    plt.close(fig)
    drawn[FILES["vs_http"]] = n
    return drawn

"""replay overhead's figures: the CDFs of the overhead in ms and %, and the overhead against
the http time, written as PNG files next to overhead.md and linked from it; none from a
document without samples, and a blank image fails the same non-trivial check."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from replay.overhead.plots import FILES
from replay.overhead.report import compact, write_report

pytest.importorskip("matplotlib")


def _doc(seed: int = 1) -> dict[str, Any]:
    """A document shaped as run_overhead's, with per-load samples (two profiles)."""
    rng = random.Random(seed)
    from replay.overhead.profiles import PROFILES
    from replay.overhead.serving import stats

    results: dict[str, Any] = {}
    for prof, rtt in (("thesis", 0.09), ("lan", 0.001)):
        results[prof] = {}
        for conn, extra in (("non-persistent", 8), ("persistent", 3)):
            http = [0.8 + rng.uniform(0, 0.4) for _ in range(12)]
            by: dict[str, Any] = {}
            for label, rounds in (("tls1.2", 1.0), ("tls1.3", 0.5)):
                https = [h + extra * rounds * rtt + rng.uniform(0, 0.05) for h in http]
                by[label] = dict(stats(http, https), model_ms=0.0, model_round_trips=0,
                                 overhead_round_trips=1.0)
            results[prof][conn] = by
    return {"config": {"quick": True, "rounds": 12, "seed": seed, "http2": False,
                       "profiles": {p: {"name": p, "rtt_ms": PROFILES[p].rtt_ms,
                                        "jitter_ms": 0, "down_kbit": 1, "up_kbit": 1,
                                        "source": "test"} for p in ("thesis", "lan")},
                       "page": {"objects": 1, "hosts": 1, "bytes": 1, "html_bytes": 1,
                                "host": "www.page.test", "redirects": ["page.test"],
                                "handshake_waves_non_persistent": 3},
                       "seconds": 1.0},
            "results": results, "connections": {}}


def non_trivial(png: Path) -> bool:
    """A PNG with a drawing in it: over 10 KB, many colours, over 3% of pixels not white."""
    import numpy as np
    from matplotlib import image

    data = png.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or len(data) < 10_000:
        return False
    px = image.imread(str(png))[..., :3]
    colours = len(np.unique((px * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    inked = float(np.mean(px.min(axis=2) < 0.9))
    return colours > 20 and inked > 0.03


def test_figures_are_written_next_to_overhead_md_and_linked(tmp_path: Path) -> None:
    write_report(tmp_path, _doc())
    md = (tmp_path / "overhead.md").read_text()
    for f in FILES.values():
        assert non_trivial(tmp_path / f), f
        assert f"]({f})" in md
    assert "median ~200 ms" in md and "90th ~1.1 s" in md


def test_no_samples_no_figures_and_a_blank_image_is_trivial(tmp_path: Path) -> None:
    """The twin: a recorded document (samples stripped) draws nothing and links nothing; an
    empty figure of the same size fails the check the drawn ones pass."""
    write_report(tmp_path, compact(_doc()))
    md = (tmp_path / "overhead.md").read_text()
    assert not any((tmp_path / f).exists() for f in FILES.values())
    assert "Not drawn: this document has no per-load samples" in md
    assert ".png)" not in md
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 4.8))
    fig.savefig(tmp_path / "blank.png", dpi=90)
    plt.close(fig)
    assert not non_trivial(tmp_path / "blank.png")

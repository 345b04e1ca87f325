"""Where benchmark results go.

A benchmark run "just to see" must not touch tracked files: by default every suite writes
under ``var/results/`` (ignored by git). ``make bench-record`` sets ``CONVERGE_RECORD=1``,
and then the same paths are the tracked ones (``bench/results/``, ``docs/benchmarks.md``,
``client-libs/<lang>/bench-results.json``), to be committed as the project's figures.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "var" / "results"


def recording() -> bool:
    return os.environ.get("CONVERGE_RECORD") == "1"


def results_path(relative: str) -> Path:
    """``ROOT/relative`` when recording, else the same path under ``var/results/``."""
    return (ROOT if recording() else SCRATCH) / relative


__all__ = ["ROOT", "SCRATCH", "recording", "results_path"]

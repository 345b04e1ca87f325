"""``replay reproduce`` checks its options before any work: a bad ``--worlds`` model or
``--world-sites`` is one line and exit 2 within seconds, and nothing is written to --out.
The twin: a valid model list passes the check (the same validation, in-process)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPLAY = str(Path(sys.executable).parent / "replay")


@pytest.mark.parametrize(("args", "says"), [
    (["--worlds", "thesis,zipf:x"], "zipf exponent"),
    (["--worlds", "pareto"], "unknown popularity model 'pareto'"),
    (["--world-sites", "0"], "--world-sites must be at least 1"),
])
def test_bad_option_stops_before_any_work(tmp_path: Path, args: list[str], says: str) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    done = subprocess.run([REPLAY, "reproduce", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: ") and says in lines[0]
    assert not out.exists()
    assert time.monotonic() - started < 60


def test_twin_valid_models_pass_the_check() -> None:
    from replay.reproduce import WORLD_MODELS
    from replay.rootstore.world import root_weights

    for model in (*WORLD_MODELS, "zipf:0.5"):
        assert len(root_weights(1, model)) == 1

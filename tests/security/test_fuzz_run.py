"""A short bounded fuzzing run of every parser (``fuzz/run.py``), and its must-fail twin."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from security_support import REPO, Results

RUNNER = REPO / "fuzz" / "run.py"


def fuzz(seconds: float, *extra: str, env: dict[str, str] | None = None,
         cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), "--seconds", str(seconds), *extra],
        capture_output=True, text=True, timeout=seconds + 150, cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_short_fuzzing_run_finds_no_crash(tmp_path: Path, results: Results) -> None:
    t0 = time.monotonic()
    # A fixed seed and input count make the suite's run reproducible: it cannot fail at random
    # on a crash some other run happens to find (longer random runs: make fuzz).
    proc = fuzz(60, "--seed", "1", "--runs", "40000", cwd=tmp_path)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    results.add("hostile input", "fuzzing every parser, 40,000 inputs, seed 1 (fuzz/run.py)",
                "no crash", summary, took)


def test_fuzzer_reports_a_crashing_target(tmp_path: Path) -> None:
    """Must-fail twin: a target that raises outside its family makes the run fail."""
    proc = fuzz(3, "--target", "twin: crashes on purpose", env={"CONVERGE_FUZZ_TWIN": "1"},
                cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "KeyError" in proc.stderr

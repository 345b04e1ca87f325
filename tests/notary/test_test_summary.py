"""scripts/test-summary: the closing table of make test and its ``N passed, N failed`` line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-summary"


def summary(tmp_path: Path, suites: list[tuple[str, int, str]]) -> list[str]:
    status = tmp_path / "status.tsv"
    rows = []
    for name, rc, log_text in suites:
        log = tmp_path / f"{name}.log"
        log.write_text(log_text)
        rows.append(f"{name}\t{rc}\t3\t{log}")
    status.write_text("\n".join(rows) + "\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(status)], capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout.strip().splitlines()


def test_counts_every_kind_of_suite(tmp_path: Path) -> None:
    lines = summary(tmp_path, [
        ("pytest", 0, "....\n993 passed, 2 skipped in 219.32s (0:03:39)\n"),
        ("c", 0, "120 passed, 0 failed\nvalgrind...\n120 passed, 0 failed\nclient-libs/c: ok\n"),
        ("go", 0, "ok pkg 1.2s\ngo: 40 passed, 0 failed, 1 skipped\n"),
        ("lint", 0, "All checks passed!\n"),
    ])
    assert lines[-1] == "1154 passed, 0 failed"
    assert any(ln.startswith("go ") and " 40 " in ln and "ok" in ln for ln in lines)


def test_failures_are_counted_and_named(tmp_path: Path) -> None:
    lines = summary(tmp_path, [
        ("pytest", 1, "F.\n1 failed, 10 passed, 1 error in 2s\n"),
        ("java", 1, "BUILD FAILURE\n"),  # no count at all: one failure
        ("go", 1, "go: 5 passed, 0 failed, 0 skipped\nbuild failed\n"),  # failed after tests
    ])
    assert lines[-1] == "15 passed, 4 failed"
    assert sum("FAILED (exit 1)" in ln for ln in lines) == 3

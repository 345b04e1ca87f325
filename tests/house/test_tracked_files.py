"""No tracked file over 1 MB: results in git are summaries and figures, per-site data is
generated under var/ (bench/paths.py). The twin runs the check on a small repository that
tracks a file over the limit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1_000_000  # bytes

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="not a git checkout")


def oversized(repo: Path, limit: int = LIMIT) -> list[str]:
    """Tracked files (as they are in the working tree) larger than ``limit`` bytes."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True,
                         check=True, timeout=60).stdout
    big = []
    for name in out.decode("utf-8", "surrogateescape").split("\0"):
        path = repo / name
        if name and path.is_file() and not path.is_symlink() and path.stat().st_size > limit:
            big.append(f"{name} ({path.stat().st_size:,} bytes)")
    return big


def test_no_tracked_file_is_over_1_mb() -> None:
    assert oversized(ROOT) == []


def test_twin_a_tracked_file_over_the_limit_is_reported(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / "small.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "bulk.json").write_bytes(b"[" + b"0," * 600_000 + b"0]\n")
    (tmp_path / "untracked.bin").write_bytes(b"\0" * (LIMIT + 1))
    subprocess.run(["git", "-C", str(tmp_path), "add", "small.json", "bulk.json"], check=True,
                   timeout=60)
    assert oversized(tmp_path) == ["bulk.json (1,200,004 bytes)"]

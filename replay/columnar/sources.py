"""The inputs: which files, in which layout; nfdump captures printed to text first."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from replay.errors import ReplayInputError, ReplayIOError
from replay.flows import (
    detect_layout,
)
from replay.ingest import MAX_LINE_CHARS, NFDUMP_MAGIC, nfdump_command


def expand_inputs(paths: Iterable[Path]) -> list[Path]:
    """Files to read, in order: a directory stands for its ``nfcapd.*`` files (or, without
    any, its regular files), a path with ``*?[`` for the files it matches; each sorted by
    name, which for ``nfcapd.YYYYMMDDhhmm`` files is time order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            files = sorted(f for f in p.rglob("nfcapd.*") if f.is_file())
            out += files or sorted(f for f in p.iterdir() if f.is_file())
        elif any(c in str(p) for c in "*?["):
            anchor = Path(p.anchor) if p.is_absolute() else Path(".")
            pattern = str(p.relative_to(anchor)) if p.is_absolute() else str(p)
            matched = sorted(f for f in anchor.glob(pattern) if f.is_file())
            if not matched:
                raise ReplayInputError(f"no file matches {p}")
            out += matched
        else:
            out.append(p)
    return out


@dataclass
class Source:
    """One input as a text file the engine scans."""

    path: Path  # what the user named
    text: Path  # the text the engine reads (the nfdump output for binary files)
    display: str  # the name in messages (as the reference prints it)
    layout: str  # canonical | nfdump-legacy | nfdump-new | nfdump-fmt
    header: list[str]
    index: int
    size: int
    # the header's line (1 = the first; 0: no header, nfdump's fmt output)
    header_line: int = 1
    # nfdump's output for a capture file (printed in UTC, TZ=UTC), not a text trace
    from_nfdump: bool = False


def _first_line(path: Path) -> tuple[str, int]:
    """The header and its line number: the first line the reference reads as one (not blank,
    not a comment, not over its bound on a line's length); ("", 0): none."""
    try:
        with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
            for number, raw in enumerate(fh, 1):
                line = raw.rstrip("\r\n")
                if line.strip() and not line.startswith("#") and len(line) <= MAX_LINE_CHARS:
                    return line, number
    except OSError as exc:
        raise ReplayIOError(f"cannot open {path}: {exc}") from exc
    return "", 0


def _run_nfdump(path: Path, out: Path, output: str, nfdump_filter: str | None) -> None:
    exe = shutil.which("nfdump")
    if exe is None:
        raise ReplayIOError("'nfdump' not found on PATH (install the nfdump package)")
    env = dict(os.environ, TZ="UTC", LC_ALL="C")
    try:
        with out.open("wb") as fh:
            proc = subprocess.run(nfdump_command(path, output, exe, nfdump_filter), stdout=fh,
                                  stderr=subprocess.PIPE, env=env, timeout=24 * 3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayIOError(f"cannot run nfdump on {path}: {exc}") from exc
    # one line: nfdump prints several
    stderr = "; ".join(x.strip() for x in proc.stderr[:65536].decode("utf-8", "replace")
                       .splitlines() if x.strip())
    if proc.returncode != 0 and "No matching flows" not in stderr:
        raise ReplayIOError(f"nfdump failed on {path} (exit {proc.returncode}): {stderr[:500]}")
    if stderr and ("error" in stderr.lower() or "short read" in stderr.lower()):
        raise ReplayIOError(f"nfdump reported errors on {path}: {stderr[:500]}")


def plan_sources(paths: Iterable[Path], fmt: str, nfdump_output: str, work: Path,
                 tz: tzinfo, nfdump_filter: str | None = None) -> list[Source]:
    sources = []
    for i, path in enumerate(expand_inputs(paths)):
        try:
            with path.open("rb") as fh:
                magic = fh.read(2)
        except OSError as exc:
            raise ReplayIOError(f"cannot read {path}: {exc}") from exc
        kind = ("nfdump" if magic == NFDUMP_MAGIC else "csv") if fmt == "auto" else fmt
        if kind == "nfdump":
            text = work / f"nfdump-{i}.txt"
            _run_nfdump(path, text, nfdump_output, nfdump_filter)
            display = f"{path} (nfdump)"
        else:
            text, display = path, str(path)
        header_line = 1
        if kind == "nfdump" and nfdump_output == "fmt":
            layout, header, header_line = "nfdump-fmt", [], 0
        else:
            first, header_line = _first_line(text)
            if not first:
                continue  # an empty file: no flows
            import csv as _csv

            header = next(_csv.reader([first]))
            layout = detect_layout(header, tz).name
        sources.append(Source(path, text, display, layout, header, i, text.stat().st_size,
                              header_line, kind == "nfdump"))
    return sources

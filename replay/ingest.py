"""Read flow files: nfdump binary capture files (through the ``nfdump`` tool), nfdump CSV in
both layouts, and our canonical CSV. Everything streams, one record at a time.

Malformed rows are never mixed in: in strict mode the first one raises ``MalformedRow``; by
default each one is counted and reported (file and line) through an ``ErrorLog``, and skipped.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path

from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.flows import (
    NFDUMP_FMT,
    FlowRecord,
    Layout,
    detect_layout,
    nfdump_fmt_layout,
)

NFDUMP_MAGIC = b"\x0c\xa5"
MAX_LINE_CHARS = 16_384
MAX_STDERR_BYTES = 64 * 1024
FORMATS = ("auto", "nfdump", "csv")
NFDUMP_OUTPUTS = ("fmt", "csv")


@dataclass
class ErrorLog:
    """Counts malformed rows and keeps the first ``keep`` messages; ``emit`` reports each."""

    strict: bool = False
    keep: int = 100
    count: int = 0
    messages: list[str] = field(default_factory=list)
    emit: Callable[[str], None] | None = None

    def add(self, err: MalformedRow) -> None:
        if self.strict:
            raise err
        self.count += 1
        msg = str(err)
        if len(self.messages) < self.keep:
            self.messages.append(msg)
        if self.emit is not None and self.count <= self.keep:
            self.emit(f"malformed row skipped: {msg}")
        elif self.emit is not None and self.count == self.keep + 1:
            self.emit("more malformed rows; further messages suppressed (counted)")


def sniff_format(path: Path) -> str:
    """``nfdump`` for an nfdump binary file (magic 0xA50C), else ``csv``."""
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise ReplayIOError(f"cannot read {path}: {exc}") from exc
    return "nfdump" if head == NFDUMP_MAGIC else "csv"


def _parse_lines(lines: Iterable[str], source: str, layout: Layout | None, sep: str,
                 errors: ErrorLog, tz: tzinfo, first_line: int = 1) -> Iterator[FlowRecord]:
    """Parse CSV text lines; the first non-empty line is the header unless ``layout`` given."""
    lineno = first_line - 1
    for raw in lines:
        lineno += 1
        line = raw.rstrip("\r\n")
        if not line.strip():
            if layout is not None and layout.has_header:
                # nfdump <= 1.7.4 ends -o csv output with a blank line and a summary block.
                continue
            continue
        if line.startswith("Summary") and layout is not None and layout.name.startswith("nfdump"):
            return
        if line.startswith("#"):
            continue
        if len(line) > MAX_LINE_CHARS:
            errors.add(MalformedRow(source, lineno, "line too long"))
            continue
        fields = next(csv.reader([line])) if sep == "," else line.split(sep)
        if layout is None:
            layout = detect_layout(fields, tz)
            continue
        try:
            yield layout.parse(fields, source, lineno)
        except MalformedRow as err:
            errors.add(err)


def read_csv_file(path: Path, errors: ErrorLog, tz: tzinfo = UTC) -> Iterator[FlowRecord]:
    """Stream records from a CSV flow file in any layout recognised by its header."""
    try:
        fh = path.open("r", encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise ReplayIOError(f"cannot open {path}: {exc}") from exc
    with fh:
        yield from _parse_lines(fh, str(path), None, ",", errors, tz)


def nfdump_command(path: Path, output: str = "fmt", nfdump: str = "nfdump",
                   nfdump_filter: str | None = None) -> list[str]:
    """The ``nfdump`` argv for reading ``path`` in our ``fmt:`` layout or its own CSV."""
    if output not in NFDUMP_OUTPUTS:
        raise ReplayInputError(f"nfdump output must be one of {NFDUMP_OUTPUTS}")
    argv = [nfdump, "-r", str(path), "-N"]
    argv += ["-q", "-o", f"fmt:{NFDUMP_FMT}"] if output == "fmt" else ["-o", "csv"]
    if nfdump_filter:
        argv.append(nfdump_filter)
    return argv


def read_nfdump_file(path: Path, errors: ErrorLog, output: str = "fmt", nfdump: str = "nfdump",
                     nfdump_filter: str | None = None) -> Iterator[FlowRecord]:
    """Stream records from an nfdump binary file by running the real ``nfdump`` (in UTC).

    ``output="fmt"`` (default) asks for millisecond timestamps in our ``|`` layout;
    ``output="csv"`` reads nfdump's own CSV (legacy or new layout, detected from its header).
    """
    exe = shutil.which(nfdump)
    if exe is None:
        raise ReplayIOError(f"{nfdump!r} not found on PATH (install the nfdump package)")
    argv = nfdump_command(path, output, exe, nfdump_filter)
    env = dict(os.environ, TZ="UTC", LC_ALL="C")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise ReplayIOError(f"cannot run nfdump: {exc}") from exc
    assert proc.stdout is not None and proc.stderr is not None
    text = io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace", newline="")
    layout = nfdump_fmt_layout() if output == "fmt" else None
    sep = "|" if output == "fmt" else ","
    finished = False
    try:
        yield from _parse_lines(text, f"{path} (nfdump)", layout, sep, errors, UTC)
        finished = True
    finally:
        if not finished:
            proc.kill()
        text.close()
        stderr = "; ".join(x.strip() for x in proc.stderr.read(MAX_STDERR_BYTES)
                           .decode("utf-8", "replace").splitlines() if x.strip())
        proc.stderr.close()
        rc = proc.wait(timeout=30)
    if rc != 0 and "No matching flows" not in stderr:
        raise ReplayIOError(f"nfdump failed on {path} (exit {rc}): {stderr[:500]}")
    if finished and stderr and ("error" in stderr.lower() or "short read" in stderr.lower()):
        raise ReplayIOError(f"nfdump reported errors on {path}: {stderr[:500]}")


def read_flows(paths: Iterable[Path], errors: ErrorLog, fmt: str = "auto",
               nfdump_output: str = "fmt", tz: tzinfo = UTC,
               nfdump_filter: str | None = None) -> Iterator[FlowRecord]:
    """Stream records from several files in order, each in its own (or the given) format."""
    if fmt not in FORMATS:
        raise ReplayInputError(f"format must be one of {FORMATS}")
    for path in paths:
        kind = sniff_format(path) if fmt == "auto" else fmt
        if kind == "nfdump":
            yield from read_nfdump_file(path, errors, nfdump_output, nfdump_filter=nfdump_filter)
        else:
            yield from read_csv_file(path, errors, tz)


def stderr_emit(msg: str) -> None:
    print(msg, file=sys.stderr)

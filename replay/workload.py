"""Workload files (timed validation events), name maps and farm target lists: read and write,
streamed. Formats are documented in docs/replay.md.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.flows import _CANONICAL_IPV4 as CANONICAL_IPV4
from replay.flows import _PLAIN_HOSTNAME as PLAIN_HOSTNAME
from replay.flows import MAX_HOSTNAME_CHARS, parse_address, parse_hostname
from replay.ingest import ErrorLog
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, StageCounters, Target, WorkloadEvent

WORKLOAD_COLUMNS = ("offset", "kind", "client", "host", "port", "fingerprint", "ssl_bytes")
TARGET_COLUMNS = ("host", "port", "fingerprint", "role")
MAX_MAP_ENTRIES = 20_000_000


def _open(path: Path, mode: str) -> TextIO:
    try:
        fh: TextIO = path.open(mode, encoding="utf-8", newline="")  # type: ignore[assignment]
        return fh
    except OSError as exc:
        raise ReplayIOError(f"cannot open {path}: {exc}") from exc


class WorkloadWriter:
    """Write workload events as CSV, one row per event, flushed as it goes."""

    def __init__(self, fh: TextIO) -> None:
        self._w = csv.writer(fh, lineterminator="\n")
        self._w.writerow(WORKLOAD_COLUMNS)
        self.rows = 0

    def write(self, ev: WorkloadEvent) -> None:
        self._w.writerow([f"{ev.offset:.6f}", ev.kind, ev.client, ev.host, ev.port,
                          ev.fingerprint, ev.ssl_bytes])
        self.rows += 1


def write_workload(events: Iterable[WorkloadEvent], path: Path) -> int:
    with _open(path, "w") as fh:
        w = WorkloadWriter(fh)
        for ev in events:
            w.write(ev)
        return w.rows


def _event(row: list[str] | tuple[object, ...]) -> WorkloadEvent:
    """One workload row (text or typed values), checked."""
    if len(row) != len(WORKLOAD_COLUMNS):
        raise ValueError(f"expected {len(WORKLOAD_COLUMNS)} fields, got {len(row)}")
    kind = str(row[1])
    if kind not in (KIND_REQUEST, KIND_CLIENT_HIT):
        raise ValueError(f"unknown kind {kind!r}")
    host = parse_hostname(str(row[3] or ""))
    if host is None:
        raise ValueError("empty host")
    port = int(str(row[4]))
    if not 0 < port < 65536:
        raise ValueError("port out of range")
    offset = float(str(row[0]))
    if offset < 0 or offset != offset:
        raise ValueError("negative offset")
    return WorkloadEvent(offset, kind, str(row[2] or ""), host, port,
                         str(row[5] or "").strip(), int(str(row[6])))


def _read_parquet_workload(path: Path, errors: ErrorLog) -> Iterator[WorkloadEvent]:
    import polars as pl

    try:
        lf = pl.scan_parquet(path)
        names = tuple(lf.collect_schema().names())
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ReplayIOError(f"cannot read {path}: {exc}") from exc
    if names[:len(WORKLOAD_COLUMNS)] != WORKLOAD_COLUMNS:
        raise ReplayInputError(f"{path}: not a workload file (columns {names!r})")
    row_number = 0
    for batch in lf.select(WORKLOAD_COLUMNS).collect_batches(chunk_size=65_536):
        for row in batch.iter_rows():
            row_number += 1
            try:
                yield _event(row)
            except (ValueError, TypeError) as exc:
                errors.add(MalformedRow(str(path), row_number, str(exc)))


def read_workload(path: Path, errors: ErrorLog | None = None) -> Iterator[WorkloadEvent]:
    """Stream events from a CSV or (``.parquet``) Parquet workload file; malformed rows go
    to ``errors`` (strict by default). Memory: one batch, whatever the file's size."""
    errors = errors or ErrorLog(strict=True)
    if path.suffix.lower() == ".parquet":
        yield from _read_parquet_workload(path, errors)
        return
    with _open(path, "r") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header[:7]) != WORKLOAD_COLUMNS:
            raise ReplayInputError(f"{path}: not a workload file (header {header!r})")
        hosts: dict[str, str] = {}  # a host as written -> as checked (sites repeat)
        for row in reader:
            if not row:
                continue
            try:
                ev = _text_event(row, hosts)
            except ValueError as exc:
                errors.add(MalformedRow(str(path), reader.line_num, str(exc)))
                continue
            yield ev


HOSTS_KEPT = 65_536  # checked host names a reader remembers


def _text_event(row: list[str], hosts: dict[str, str]) -> WorkloadEvent:
    """:func:`_event` for a row of text (a CSV workload), with the checked form of each host
    remembered in ``hosts``: the same checks and errors, about half the time."""
    if len(row) != len(WORKLOAD_COLUMNS):
        return _event(row)  # the error
    offset_text, kind, client, host_text, port_text, fingerprint, ssl_text = row
    host = hosts.get(host_text)
    if host is None or (kind != KIND_REQUEST and kind != KIND_CLIENT_HIT):
        ev = _event(row)  # every check, the host's included (or the error)
        if len(hosts) >= HOSTS_KEPT:
            hosts.clear()
        hosts[host_text] = ev.host
        return ev
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError("port out of range")
    offset = float(offset_text)
    if offset < 0 or offset != offset:
        raise ValueError("negative offset")
    return WorkloadEvent(offset, kind, client, host, port, fingerprint.strip(), int(ssl_text))


# every line of a map in the common form: a canonical dotted quad, one space or comma and a
# name in canonical form (lower case, no final dot), or a comment. A map of such lines only is
# read by one pass of this expression; any other map line by line by the general rules
_PLAIN_MAP_LINES = re.compile(
    rf"^(?:({CANONICAL_IPV4.pattern})[ ,]({PLAIN_HOSTNAME.pattern})|#[^\r\n]*)\r?$",
    re.MULTILINE)


PLAIN_MAP_BYTES = 64 * 1024 * 1024  # larger maps are read line by line (memory)


def _plain_name_map(text: str) -> dict[str, str] | None:
    """The map of ``text`` when every line is in the common form (about half the time of
    reading it line by line: 0.04 s for 50,000 lines), else None."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if "\r" in text.replace("\r\n", "") or lines >= MAX_MAP_ENTRIES:
        return None
    found = _PLAIN_MAP_LINES.findall(text)
    if len(found) != lines:
        return None  # a line in another form (or an empty one)
    if any(len(name) > MAX_HOSTNAME_CHARS or name in ("0", "-") for _, name in found):
        return None  # a line the general rules refuse (even if a later line replaces it)
    return {addr: name for addr, name in found if addr}


def read_name_map(path: Path, errors: ErrorLog | None = None) -> dict[str, str]:
    """An address-to-name map: lines ``ADDRESS NAME`` or ``ADDRESS,NAME``; ``#`` comments."""
    errors = errors or ErrorLog(strict=True)
    with _open(path, "r") as fh:
        if os.fstat(fh.fileno()).st_size <= PLAIN_MAP_BYTES:
            try:
                plain = _plain_name_map(fh.read())
            except UnicodeDecodeError:
                plain = None  # the general rules below meet the same error, line by line
            if plain is not None:
                return plain
            fh.seek(0)
        try:
            return _name_map_lines(fh, path, errors)
        except UnicodeDecodeError as exc:
            raise ReplayInputError(f"{path}: not UTF-8 text (a name map is UTF-8: "
                                   f"{exc.reason})") from exc


def _name_map_lines(fh: TextIO, path: Path, errors: ErrorLog) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, raw in enumerate(fh, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            if len(parts) < 2:
                raise ValueError("expected an address and a name")
            addr = parse_address(parts[0])
            name = parse_hostname(parts[1])
            if name is None:
                raise ValueError("empty name")
        except ValueError as exc:
            errors.add(MalformedRow(str(path), lineno, str(exc)))
            continue
        if len(out) >= MAX_MAP_ENTRIES:
            raise ReplayInputError(f"{path}: more than {MAX_MAP_ENTRIES} entries")
        out[addr] = name
    return out


def write_targets(rows: Iterable[tuple[str, int, str, str]], path: Path) -> None:
    with _open(path, "w") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(TARGET_COLUMNS)
        for r in rows:
            w.writerow(r)


def read_targets(path: Path) -> dict[str, Target]:
    """Farm targets (``host,port,fingerprint,role``) keyed by host."""
    out: dict[str, Target] = {}
    with _open(path, "r") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not set(TARGET_COLUMNS[:3]) <= set(reader.fieldnames):
            raise ReplayInputError(f"{path}: not a targets file")
        for row in reader:
            try:
                out[row["host"]] = Target(int(row["port"]), row["fingerprint"])
            except (ValueError, TypeError) as exc:
                raise MalformedRow(str(path), reader.line_num, str(exc)) from None
    return out


def read_target_roles(path: Path) -> dict[str, str]:
    with _open(path, "r") as fh:
        return {row["host"]: row.get("role") or "" for row in csv.DictReader(fh)}


def write_stages(counters: StageCounters, path: Path, extra: dict[str, object] | None = None,
                 ) -> None:
    data = counters.as_dict()
    if extra:
        data.update(extra)
    try:
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ReplayIOError(f"cannot write {path}: {exc}") from exc


def read_stages(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplayIOError(f"cannot read stages file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ReplayInputError(f"{path}: stages file is not an object")
    return data

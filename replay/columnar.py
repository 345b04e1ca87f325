"""Flows to a workload on a columnar engine (polars: lazy scans, streaming batches).

The per-row pipeline of :mod:`replay.pipeline` is the reference: this module computes the same
workload (docs/replay.md, "Workload file") and the same stage counters, at the speed of a
columnar engine and in bounded memory. It has three phases:

1. **Ingest.** Every input (CSV in any layout; an nfdump binary file through ``nfdump -o
   fmt:...`` into a temporary text file) is scanned lazily with every field as text and
   parsed by vectorised expressions for the common form of each field. A row with any field
   in another form (an ISO time with an offset, a scaled counter ``1.2 M``, a comment or a
   blank line, a short line, an over-long field) is a *residue* row: the reference parser
   reads it from the file, so rare forms, malformed-row messages and line numbers are the
   reference's own. Addresses and server names are checked once per distinct value by the
   reference functions (a dotted-quad IPv4 address in canonical form needs no check). The
   parsed flows are written as Parquet, partitioned by a hash of the client's address, in
   batches (memory: one batch).
2. **Per partition** (``jobs`` at a time): pair the two one-way flows of a connection,
   filter, sort by time, name, pseudonymise, simulate the client cache. A partition holds
   whole clients, so the client cache needs nothing from the others.
3. **Merge** the partitions' events by time (then arrival order) into the workload file, CSV
   or Parquet, written to a temporary file and renamed at the end: an error leaves nothing
   half-written.

Semantics that differ from the per-row path only at its memory bounds: the whole trace is
sorted, so no flow is ever late (``late_dropped`` is 0 where the reorder window of the
per-row path would have dropped flows more than 600 s out of order), and the client cache
keeps every entry (no least-recently-used eviction). One-way flows are paired when their
times overlap (2 s of slack), whatever the distance between them in the stream.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any

import polars as pl

from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.flows import (
    MAX_FIELD_CHARS,
    PROTO_NAMES,
    FlowRecord,
    Layout,
    detect_layout,
    nfdump_fmt_layout,
    parse_address,
    parse_hostname,
)
from replay.ingest import MAX_LINE_CHARS, NFDUMP_MAGIC, ErrorLog, nfdump_command
from replay.pipeline import KIND_CLIENT_HIT, KIND_REQUEST, FlowFilter, StageCounters, anonymise

BATCH_ROWS = 1_000_000
# flows per partition: phase 2 holds a partition and its joins and sorts (a few times its
# size) per job, so this bounds memory (bench/replay/ingest.py --big-flows)
PART_ROWS = 1_000_000
MAX_PARTITIONS = 4096
PAIR_SLACK = 2.0
FILE_SHIFT = 40  # seq = file index << 40 | row index: arrival order across files

EPOCH_RE = r"^\d+(\.\d+)?$"
DATETIME_RE = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6})?$"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
CANONICAL_IPV4_RE = rf"^{_OCTET}(\.{_OCTET}){{3}}$"

FLOW_SCHEMA = {"seq": pl.Int64, "start": pl.Float64, "end": pl.Float64, "src": pl.String,
               "dst": pl.String, "sport": pl.Int64, "dport": pl.Int64, "proto": pl.Int64,
               "packets": pl.Int64, "bytes": pl.Int64, "sni": pl.String}
EVENT_SCHEMA = {"start": pl.Float64, "seq": pl.Int64, "kind": pl.String, "client": pl.String,
                "host": pl.String, "port": pl.Int64, "fingerprint": pl.String,
                "ssl_bytes": pl.Int64}


# ------------------------------------------------------------------------ inputs


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


def _first_line(path: Path) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
            for raw in fh:
                if raw.strip():
                    return raw.rstrip("\r\n")
    except OSError as exc:
        raise ReplayIOError(f"cannot open {path}: {exc}") from exc
    return ""


def _run_nfdump(path: Path, out: Path, output: str, flow_filter: str | None) -> None:
    exe = shutil.which("nfdump")
    if exe is None:
        raise ReplayIOError("'nfdump' not found on PATH (install the nfdump package)")
    env = dict(os.environ, TZ="UTC", LC_ALL="C")
    try:
        with out.open("wb") as fh:
            proc = subprocess.run(nfdump_command(path, output, exe, flow_filter), stdout=fh,
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
                 tz: tzinfo, flow_filter: str | None = None) -> list[Source]:
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
            _run_nfdump(path, text, nfdump_output, flow_filter)
            display = f"{path} (nfdump)"
        else:
            text, display = path, str(path)
        if kind == "nfdump" and nfdump_output == "fmt":
            layout, header = "nfdump-fmt", []
        else:
            first = _first_line(text)
            if not first:
                continue  # an empty file: no flows
            import csv as _csv

            header = next(_csv.reader([first]))
            layout = detect_layout(header, tz).name
        sources.append(Source(path, text, display, layout, header, i, text.stat().st_size))
    return sources


# ------------------------------------------------------------------------ phase 1: parse


@dataclass(frozen=True)
class Forms:
    """Which form of a field a file mostly uses (from a sample of its first rows): the fast
    path parses that form only, and a row in another form is residue. ``strip``: fields are
    padded (nfdump's ``fmt`` output)."""

    epoch_times: bool = True
    numeric_proto: bool = True
    strip: bool = False


def _text(name: str, forms: Forms) -> pl.Expr:
    return pl.col(name).str.strip_chars() if forms.strip else pl.col(name)


def _short(name: str) -> pl.Expr:
    """The reference refuses a field over MAX_FIELD_CHARS characters (e.g. a number padded
    with zeros, which a cast would read)."""
    return pl.col(name).str.len_bytes() <= MAX_FIELD_CHARS


def _divide(x: pl.Expr, d: float) -> pl.Expr:
    """``x / d`` correctly rounded, as Python divides: polars divides by a scalar by
    multiplying with its reciprocal, which is off by one unit in the last place for about a
    quarter of timestamps; a column divisor is divided element by element."""
    return x / (x * 0.0 + d)


def _time(name: str, offset: float, forms: Forms) -> pl.Expr:
    """Seconds since the epoch for the file's form of time (epoch seconds or milliseconds,
    or a naive ``YYYY-MM-DD HH:MM:SS[.fff|.ffffff]`` in the zone ``offset`` seconds east of
    UTC), else null (residue). Exactly the values the reference gives those forms."""
    t = _text(name, forms)
    if forms.epoch_times:
        v = t.cast(pl.Float64, strict=False)
        ms = ~t.str.contains(".", literal=True) & (t.str.len_bytes() >= 13)
        v = pl.when(ms).then(_divide(v, 1000.0)).otherwise(v)
        return pl.when(t.str.contains(EPOCH_RE) & (v < 1e11) & _short(name)).then(v)
    # the seconds part has few distinct values (about one per second of trace): parsed once
    # each (strptime's cache); the fraction is plain digits
    n = t.str.len_bytes()
    seconds = t.str.slice(0, 19).str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S",
                                               strict=False, cache=True).dt.epoch("us")
    dot = t.str.slice(19, 1) == "."
    frac = (pl.when(n == 19).then(pl.lit(0, pl.Int64))
            .when((n == 23) & dot).then(t.str.slice(20, 3).cast(pl.Int64, strict=False) * 1000)
            .when((n == 26) & dot).then(t.str.slice(20, 6).cast(pl.Int64, strict=False)))
    # integer microseconds, the offset included, then seconds: the reference's arithmetic
    us = pl.when(frac >= 0).then(seconds + frac - int(round(offset * 1_000_000)))
    return _divide(us.cast(pl.Float64), 1_000_000.0)


def _port(name: str, forms: Forms) -> pl.Expr:
    # polars reads only what Python's int() reads the same way (digits, a sign); an ICMP
    # type.code, spaces or underscores go to the reference
    n = _text(name, forms).cast(pl.Int64, strict=False)
    return pl.when((n >= 0) & (n <= 65535) & _short(name)).then(n)


def _proto(name: str, forms: Forms) -> pl.Expr:
    t = _text(name, forms)
    if forms.numeric_proto:
        n = t.cast(pl.Int64, strict=False)
        return pl.when((n >= 0) & (n <= 255) & ~t.str.starts_with("+") & _short(name)).then(n)
    # the names as exporters print them (upper case); other spellings go to the reference
    return t.replace_strict(PROTO_NAMES, default=None, return_dtype=pl.Int64)


def _count(name: str, forms: Forms) -> pl.Expr:
    n = _text(name, forms).cast(pl.Int64, strict=False)
    return pl.when((n >= 0) & _short(name)).then(n)


def _duration(name: str, forms: Forms) -> pl.Expr:
    # what polars reads as a float, Python's float() reads the same (HH:MM:SS: residue)
    v = _text(name, forms).cast(pl.Float64, strict=False)
    return pl.when(v.is_finite() & (v >= 0) & _short(name)).then(v)


def _sum(terms: list[pl.Expr]) -> pl.Expr:
    """A sum that is null when a term is (``sum_horizontal`` would skip it)."""
    total = pl.lit(0, pl.Int64)
    for t in terms:
        total = total + t
    return total


SAMPLE_LINES = 1000


def _forms(src: Source, time_col: int, proto_col: int) -> Forms:
    """The forms of the file's first rows (at most :data:`SAMPLE_LINES`)."""
    import csv as _csv
    import itertools

    times: list[str] = []
    protos: list[str] = []
    sep = "|" if src.layout == "nfdump-fmt" else ","
    with src.text.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        lines = itertools.islice(fh, 0 if src.layout == "nfdump-fmt" else 1, SAMPLE_LINES)
        rows = (line.split(sep) for line in lines) if sep == "|" else _csv.reader(lines)
        for row in rows:
            if len(row) > max(time_col, proto_col):
                times.append(row[time_col].strip())
                protos.append(row[proto_col].strip())
    epoch = sum(1 for t in times if re.fullmatch(EPOCH_RE, t))
    numeric = sum(1 for p in protos if p.isdigit())
    return Forms(epoch_times=epoch * 2 >= max(1, len(times)),
                 numeric_proto=numeric * 2 >= max(1, len(protos)),
                 strip=src.layout == "nfdump-fmt")


def _fast_columns(src: Source, offset: float, forms: Forms,
                  ) -> tuple[list[pl.Expr], list[str], list[pl.Expr]]:
    """Expressions giving the flow columns (null where the fast path does not apply), the
    columns the row needs (all non-null), and further checks that must hold, for one
    layout."""
    checks: list[pl.Expr] = []
    idx = {h.strip(): i for i, h in enumerate(src.header)}

    def col(name: str) -> str:
        return f"column_{idx[name] + 1}" if src.header else name

    def text(c: str) -> pl.Expr:
        return _text(c, forms)

    def port(c: str) -> pl.Expr:
        return _port(c, forms)

    def count(c: str) -> pl.Expr:
        return _count(c, forms)

    def when(c: str) -> pl.Expr:
        return _time(c, offset, forms)

    if src.layout == "canonical":
        cols = {n: col(n) for n in ("start", "end", "src", "dst", "sport", "dport", "proto",
                                    "packets", "bytes")}
        exprs = [when(cols["start"]).alias("start"), when(cols["end"]).alias("end"),
                 text(cols["src"]).alias("src_raw"), text(cols["dst"]).alias("dst_raw"),
                 port(cols["sport"]).alias("sport"), port(cols["dport"]).alias("dport"),
                 _proto(cols["proto"], forms).alias("proto"),
                 count(cols["packets"]).alias("packets"), count(cols["bytes"]).alias("bytes"),
                 (text(col("sni")) if "sni" in idx else pl.lit(None, pl.String))
                 .alias("sni_raw")]
        needed = list(cols.values())
    elif src.layout == "nfdump-legacy":
        ts = when(col("ts"))
        end = when(col("te"))
        if "td" in idx:
            td = text(col("td"))
            absent = td.is_null() | (td == "")
            end = pl.when(absent).then(end).otherwise(
                pl.max_horizontal(end, ts + _duration(col("td"), forms)))
            checks.append(absent | _duration(col("td"), forms).is_not_null())
        opt = {n: col(n) for n in ("obyt", "ipkt", "opkt") if n in idx}
        zero = pl.lit(0, pl.Int64)
        exprs = [ts.alias("start"), end.alias("end"), text(col("sa")).alias("src_raw"),
                 text(col("da")).alias("dst_raw"), port(col("sp")).alias("sport"),
                 port(col("dp")).alias("dport"), _proto(col("pr"), forms).alias("proto"),
                 ((count(opt["ipkt"]) if "ipkt" in opt else zero)
                  + (count(opt["opkt"]) if "opkt" in opt else zero)).alias("packets"),
                 (count(col("ibyt")) + (count(opt["obyt"]) if "obyt" in opt else zero))
                 .alias("bytes"), pl.lit(None, pl.String).alias("sni_raw")]
        needed = [col(n) for n in ("ts", "te", "sa", "da", "sp", "dp", "pr", "ibyt")]
        needed += list(opt.values())
    elif src.layout == "nfdump-new":
        start = when(col("firstSeen"))
        end = (when(col("lastSeen")) if "lastSeen" in idx
               else start + _duration(col("duration"), forms))
        bytes_cols = [col(c) for c in ("bytes", "inBytes", "outBytes") if c in idx]
        pkt_cols = [col(c) for c in ("packets", "inPackets", "outPackets") if c in idx]
        sni = idx.get("sniName", idx.get("sni"))
        exprs = [start.alias("start"), end.alias("end"),
                 text(col("srcAddr")).alias("src_raw"), text(col("dstAddr")).alias("dst_raw"),
                 port(col("srcPort")).alias("sport"), port(col("dstPort")).alias("dport"),
                 _proto(col("proto"), forms).alias("proto"),
                 _sum([count(c) for c in pkt_cols]).alias("packets"),
                 _sum([count(c) for c in bytes_cols]).alias("bytes"),
                 (text(f"column_{sni + 1}") if sni is not None else pl.lit(None, pl.String))
                 .alias("sni_raw")]
        needed = [col(n) for n in ("firstSeen", "proto", "srcAddr", "dstAddr", "srcPort",
                                   "dstPort")]
        needed += [col("lastSeen") if "lastSeen" in idx else col("duration")]
        needed += pkt_cols + bytes_cols
    else:  # nfdump-fmt: 10 '|'-separated fields, no header
        c = [f"column_{i + 1}" for i in range(10)]
        exprs = [_time(c[0], 0.0, forms).alias("start"), _time(c[1], 0.0, forms).alias("end"),
                 _text(c[2], forms).alias("src_raw"), _text(c[3], forms).alias("dst_raw"),
                 _port(c[4], forms).alias("sport"), _port(c[5], forms).alias("dport"),
                 _proto(c[6], forms).alias("proto"), _count(c[7], forms).alias("packets"),
                 (_count(c[8], forms) + _count(c[9], forms)).alias("bytes"),
                 pl.lit(None, pl.String).alias("sni_raw")]
        needed = c
    return exprs, needed, checks


def _key_columns(src: Source) -> tuple[int, int]:
    """The fields whose form decides the fast path: the start time and the protocol."""
    if src.layout == "nfdump-fmt":
        return 0, 6
    idx = {h.strip(): i for i, h in enumerate(src.header)}
    t, p = {"canonical": ("start", "proto"), "nfdump-legacy": ("ts", "pr"),
            "nfdump-new": ("firstSeen", "proto")}[src.layout]
    return idx[t], idx[p]


def _scan(src: Source, lossy: bool = False) -> tuple[pl.LazyFrame, list[str]]:
    """All the fields of every row as text, with the row index (0 = the first data line).
    ``lossy``: invalid UTF-8 replaced (the reference reads so; tried when strict fails)."""
    fmt = src.layout == "nfdump-fmt"
    width = 10 if fmt else len(src.header)
    names = [f"column_{i + 1}" for i in range(width)]
    lf = pl.scan_csv(src.text, has_header=False, skip_rows=0 if fmt else 1,
                     separator="|" if fmt else ",", infer_schema=False,
                     schema=dict.fromkeys(names, pl.String), truncate_ragged_lines=True,
                     quote_char=None if fmt else '"',
                     encoding="utf8-lossy" if lossy else "utf8",
                     raise_if_empty=False)
    return lf.with_row_index("row"), names


@dataclass
class Canonical:
    """Distinct raw addresses and names, checked once each by the reference functions.
    Only the values that change (``changed``: raw -> canonical) or fail (``invalid``) are
    kept apart: most addresses are already canonical and cost nothing per row."""

    seen: set[str] = field(default_factory=set)
    changed: dict[str, str] = field(default_factory=dict)
    invalid: set[str] = field(default_factory=set)
    names: dict[str, str | None] = field(default_factory=dict)

    def learn_addresses(self, raw: pl.Series) -> None:
        values = raw.unique().drop_nulls()
        # a dotted quad without leading zeros is its own canonical form: no Python needed
        values = values.filter(~values.str.contains(CANONICAL_IPV4_RE))
        for value in values.to_list():
            if value in self.seen:
                continue
            self.seen.add(value)
            try:
                canonical = parse_address(value)
            except ValueError:
                self.invalid.add(value)
                continue
            if canonical != value:
                self.changed[value] = canonical

    def address(self, raw: str) -> pl.Expr:
        """The canonical form of column ``raw`` (null for an invalid address)."""
        e = pl.col(raw)
        if self.changed:
            e = e.replace(self.changed)
        if self.invalid:
            e = pl.when(pl.col(raw).is_in(list(self.invalid))).then(pl.lit(None, pl.String))\
                .otherwise(e)
        return e

    def map_names(self, raw: pl.Series) -> None:
        for value in raw.unique().drop_nulls().to_list():
            if value not in self.names:
                try:
                    self.names[value] = parse_hostname(value)
                except ValueError:
                    self.names[value] = None


def _hostname_fast(raw: pl.Expr) -> pl.Expr:
    """The reference's "no name" values (empty, 0, -) as null; others to be checked."""
    t = raw.str.strip_chars().str.strip_chars_end(".").str.to_lowercase()
    return pl.when(t.is_null() | t.is_in(["", "0", "-"])).then(pl.lit(None, pl.String))\
        .otherwise(raw)


MEMORY_BUDGET = 256 * 1024 * 1024  # bytes of parsed flows held before spilling to disk


class Partitions:
    """Parsed flows by partition (a hash of the client address): in memory while they fit
    :data:`MEMORY_BUDGET`, then spilled to Parquet chunks, so memory stays bounded whatever
    the trace's size."""

    def __init__(self, root: Path, count: int, flow_filter: FlowFilter,
                 budget: int = MEMORY_BUDGET) -> None:
        self.root = root
        self.count = count
        self.filter = flow_filter
        self.budget = budget
        self.chunks = 0
        self.held: list[list[pl.DataFrame]] = [[] for _ in range(count)]
        self.held_bytes = 0
        self.spilled = False

    def client_expr(self) -> pl.Expr:
        """The client's address: the destination of a server half (from a kept port to
        another), else the source (docs: pairing)."""
        ports = sorted(self.filter.ports)
        protos = sorted(self.filter.protocols)
        server = (pl.col("proto").is_in(protos) & pl.col("sport").is_in(ports)
                  & ~pl.col("dport").is_in(ports))
        return pl.when(server).then(pl.col("dst")).otherwise(pl.col("src"))

    def write(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        df = df.select(list(FLOW_SCHEMA))
        if self.count == 1:
            pieces = {0: df}
        else:
            df = df.with_columns((self.client_expr().hash(seed=1) % self.count)
                                 .cast(pl.Int64).alias("_part"))
            pieces = {int(k[0]): v.drop("_part")
                      for k, v in df.partition_by("_part", as_dict=True).items()}
        for part, chunk in pieces.items():
            self.held[part].append(chunk)
            self.held_bytes += int(chunk.estimated_size())
        if self.held_bytes > self.budget:
            self.spill()

    def spill(self) -> None:
        for part, frames in enumerate(self.held):
            if frames:
                (self.root / f"p{part}").mkdir(parents=True, exist_ok=True)
                self.chunks += 1
                pl.concat(frames).write_parquet(
                    self.root / f"p{part}" / f"c{self.chunks}.parquet", compression="lz4",
                    statistics=False)
        self.held = [[] for _ in range(self.count)]
        self.held_bytes = 0
        self.spilled = True

    def frame(self, p: int) -> pl.DataFrame:
        """Partition ``p``'s flows (read back from disk when spilled)."""
        files = sorted((self.root / f"p{p}").glob("*.parquet"))
        frames = ([pl.read_parquet(files)] if files else []) + self.held[p]
        return pl.concat(frames) if frames else pl.DataFrame(schema=FLOW_SCHEMA)

    def scan(self) -> pl.LazyFrame:
        """Every flow, lazily (for the reverse-DNS pass)."""
        files = sorted(self.root.glob("p*/*.parquet"))
        frames = [pl.scan_parquet(files)] if files else []
        frames += [f.lazy() for held in self.held for f in held]
        return pl.concat(frames) if frames else pl.LazyFrame(schema=FLOW_SCHEMA)


def _residue(src: Source, rows: set[int], tz: tzinfo, errors: ErrorLog,
             stop: int | None) -> list[tuple[int, FlowRecord]]:
    """The reference parser on the residue rows: records, and malformed rows to ``errors``
    (lines in file order, so a strict run stops at the first one)."""
    import csv as _csv

    layout: Layout = nfdump_fmt_layout() if src.layout == "nfdump-fmt" else detect_layout(
        src.header, tz)
    sep = "|" if src.layout == "nfdump-fmt" else ","
    first_data = 1 if src.layout == "nfdump-fmt" else 2  # physical line of row 0
    out: list[tuple[int, FlowRecord]] = []
    wanted = sorted(rows)
    if not wanted:
        return out
    last = wanted[-1]
    try:
        fh = src.text.open("r", encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise ReplayIOError(f"cannot open {src.text}: {exc}") from exc
    with fh:
        for lineno, raw in enumerate(fh, 1):
            row = lineno - first_data
            if row < 0:
                continue
            if row > last or (stop is not None and row >= stop):
                break
            if row not in rows:
                continue
            line = raw.rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            if len(line) > MAX_LINE_CHARS:
                errors.add(MalformedRow(src.display, lineno, "line too long"))
                continue
            fields = next(_csv.reader([line])) if sep == "," else line.split(sep)
            try:
                out.append((row, layout.parse(fields, src.display, lineno)))
            except MalformedRow as err:
                errors.add(err)
    return out


def _records_frame(src: Source, recs: list[tuple[int, FlowRecord]]) -> pl.DataFrame:
    base = src.index << FILE_SHIFT
    return pl.DataFrame(
        {"seq": [base + r for r, _ in recs], "start": [x.start for _, x in recs],
         "end": [x.end for _, x in recs], "src": [x.src for _, x in recs],
         "dst": [x.dst for _, x in recs], "sport": [x.sport for _, x in recs],
         "dport": [x.dport for _, x in recs], "proto": [x.proto for _, x in recs],
         "packets": [x.packets for _, x in recs], "bytes": [x.bytes for _, x in recs],
         "sni": [x.sni for _, x in recs]}, schema=FLOW_SCHEMA)


class NotUtf8(Exception):
    """An input is not valid UTF-8 where the strict (faster) decoder read it."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def _batches(src: Source, parsed: pl.LazyFrame) -> Iterator[pl.DataFrame]:
    try:
        yield from parsed.collect_batches(chunk_size=BATCH_ROWS)
    except pl.exceptions.ComputeError as exc:
        if "utf" in str(exc).lower():
            raise NotUtf8(src.index) from exc
        raise ReplayInputError(f"{src.display}: {str(exc).splitlines()[0]}") from exc


def ingest_source(src: Source, parts: Partitions, canon: Canonical, tz: tzinfo,
                  errors: ErrorLog, progress: Callable[[int], None], lossy: bool = False,
                  ) -> int:
    """Phase 1 for one input; returns the number of flow records (``flows_read``).
    ``lossy``: decode invalid UTF-8 as replacement characters (slower; the reference's
    reading), else raise :class:`NotUtf8` at the first invalid byte."""
    offset = 0.0
    if src.layout != "nfdump-fmt":
        probe = tz.utcoffset(None)
        offset = probe.total_seconds() if probe is not None else 0.0
    lf, names = _scan(src, lossy)
    forms = _forms(src, *_key_columns(src))
    exprs, needed, checks = _fast_columns(src, offset, forms)
    # No length checks here: a value the fast path accepts is short by construction (a
    # number, a time, an address or name the reference accepted), so an over-long field or
    # line of the fields the layout uses always ends in the residue, where the reference
    # checks it. The layout's other columns are never read.
    complete = pl.all_horizontal([pl.col(c).is_not_null() for c in needed] + checks)
    # nfdump <= 1.7.4 ends its CSV with a "Summary" block: the reference stops there
    summary = (pl.col(names[0]).str.starts_with("Summary") if src.layout.startswith("nfdump")
               else pl.lit(False))
    parsed = lf.select("row", *exprs, complete.alias("_complete"), summary.alias("_summary"))
    fast_ok = pl.all_horizontal([pl.col(c).is_not_null() for c in (
        "start", "end", "sport", "dport", "proto", "packets", "bytes", "src_raw", "dst_raw")])
    parsed = parsed.with_columns(
        (pl.col("_complete") & fast_ok & (pl.col("end") >= pl.col("start"))).alias("_ok"),
        _hostname_fast(pl.col("sni_raw")).alias("sni_raw"))
    residue: set[int] = set()
    flows = 0
    stop: int | None = None
    base = src.index << FILE_SHIFT
    for batch in _batches(src, parsed):
        hits = batch.filter(pl.col("_summary"))
        if hits.height:
            stop = int(hits["row"][0])
            batch = batch.filter(pl.col("row") < stop)
        progress(batch.height)
        if batch["_ok"].all():
            ok = batch
        else:
            ok = batch.filter(pl.col("_ok"))
            residue.update(batch.filter(~pl.col("_ok"))["row"].to_list())
        if ok.height:
            canon.learn_addresses(ok["src_raw"])
            canon.learn_addresses(ok["dst_raw"])
            sni = pl.lit(None, pl.String)
            named = ok["sni_raw"].null_count() < ok.height
            if named:
                canon.map_names(ok["sni_raw"])
                sni = pl.col("sni_raw").replace_strict(canon.names, default=None,
                                                       return_dtype=pl.String)
            ok = ok.with_columns(canon.address("src_raw").alias("src"),
                                 canon.address("dst_raw").alias("dst"), sni.alias("sni"),
                                 (pl.col("row").cast(pl.Int64) + base).alias("seq"))
            if canon.invalid or named:
                bad = (pl.col("src").is_null() | pl.col("dst").is_null()
                       | (pl.col("sni_raw").is_not_null() & pl.col("sni").is_null()))
                residue.update(ok.filter(bad)["row"].to_list())
                ok = ok.filter(~bad)
            parts.write(ok)
            flows += ok.height
        if stop is not None:
            break
    recs = _residue(src, residue, tz, errors, stop)
    parts.write(_records_frame(src, recs))
    return flows + len(recs)


# ------------------------------------------------------------------------ phase 2


@dataclass(frozen=True)
class EngineConfig:
    flow_filter: FlowFilter = FlowFilter()
    client_cache_lifetime: float | None = None
    salt: bytes = b"converge-replay"
    include_client_hits: bool = True
    trace_start: float | None = None
    jobs: int = 1


def _pair(df: pl.DataFrame, flt: FlowFilter) -> tuple[pl.DataFrame, int, int]:
    """Merge each client half with the overlapping server half of the reversed 5-tuple;
    lone server halves turned around. Returns (flows, paired, reverse_only)."""
    ports, protos = sorted(flt.ports), sorted(flt.protocols)
    is_proto = pl.col("proto").is_in(protos)
    client = is_proto & pl.col("dport").is_in(ports)
    server = is_proto & pl.col("sport").is_in(ports) & ~pl.col("dport").is_in(ports)
    df = df.with_columns(client.alias("_c"), server.alias("_s"))
    if not df["_s"].any():  # no server halves: nothing to pair (bidirectional records)
        return df.drop("_c", "_s"), 0, 0
    halves_c = df.filter(pl.col("_c"))
    halves_s = df.filter(pl.col("_s")).rename(
        {"src": "dst", "dst": "src", "sport": "dport", "dport": "sport"})
    rest = df.filter(~pl.col("_c") & ~pl.col("_s")).drop("_c", "_s")
    key = ["src", "sport", "dst", "dport", "proto"]
    pairs = halves_c.select(*key, "seq", "start", "end").join(
        halves_s.select(*key, pl.col("seq").alias("s_seq"), pl.col("start").alias("s_start"),
                        pl.col("end").alias("s_end")), on=key, how="inner")
    pairs = pairs.filter((pl.col("start") <= pl.col("s_end") + PAIR_SLACK)
                         & (pl.col("s_start") <= pl.col("end") + PAIR_SLACK))
    # one partner each: the server half closest in start time, then each used once
    pairs = (pairs.with_columns((pl.col("start") - pl.col("s_start")).abs().alias("_gap"))
             .sort(["seq", "_gap", "s_seq"]).unique("seq", keep="first", maintain_order=True)
             .sort(["s_seq", "_gap", "seq"]).unique("s_seq", keep="first", maintain_order=True)
             .select("seq", "s_seq"))
    sv = halves_s.select(pl.col("seq").alias("s_seq"), pl.col("start").alias("s_start"),
                         pl.col("end").alias("s_end"), pl.col("packets").alias("s_packets"),
                         pl.col("bytes").alias("s_bytes"), pl.col("sni").alias("s_sni"))
    merged = (halves_c.join(pairs, on="seq", how="inner").join(sv, on="s_seq", how="inner")
              .with_columns(pl.min_horizontal("start", "s_start").alias("start"),
                            pl.max_horizontal("end", "s_end").alias("end"),
                            (pl.col("packets") + pl.col("s_packets")).alias("packets"),
                            (pl.col("bytes") + pl.col("s_bytes")).alias("bytes"),
                            pl.coalesce("sni", "s_sni").alias("sni"),
                            pl.max_horizontal("seq", "s_seq").alias("seq")))
    lone_c = halves_c.join(pairs, on="seq", how="anti")
    lone_s = halves_s.join(pairs.select(pl.col("s_seq").alias("seq")), on="seq", how="anti")
    cols = list(FLOW_SCHEMA)
    out = pl.concat([rest.select(cols), merged.select(cols), lone_c.select(cols),
                     lone_s.select(cols)])
    return out, pairs.height, lone_s.height


def _client_cache(df: pl.DataFrame, lifetime: float | None) -> pl.Series:
    """``True`` where a flow is a client-cache hit (``df`` sorted by time, then arrival)."""
    key = ["client", "host", "port"]
    if lifetime is None:  # the first flow of each (client, host, port) asks the notary
        return df.select((~pl.struct(key).is_first_distinct()).alias("hit"))["hit"]
    order = df.with_row_index("_i").sort([*key, "start", "seq"])
    times = order["start"].to_list()
    groups = order.select(pl.struct(key).rank("dense").alias("g"))["g"].to_list()
    hits = [False] * len(times)
    expiry = -math.inf
    last_group = None
    for i, (t, g) in enumerate(zip(times, groups, strict=True)):
        if g != last_group:
            last_group, expiry = g, -math.inf
        if t < expiry:
            hits[i] = True
        else:
            expiry = t + lifetime
    return (order.select("_i").with_columns(pl.Series("hit", hits)).sort("_i")["hit"])


def partition_events(df: pl.DataFrame, cfg: EngineConfig, names: pl.DataFrame,
                     rdns: pl.DataFrame, targets: pl.DataFrame,
                     pseudonyms: Callable[[pl.Series], pl.DataFrame],
                     ) -> tuple[pl.DataFrame, StageCounters]:
    """Phase 2 for one partition's flows: its events sorted by (start, seq)."""
    c = StageCounters()
    empty = pl.DataFrame(schema=EVENT_SCHEMA)
    if df.height == 0:
        return empty, c
    flows, c.paired, c.reverse_only = _pair(df, cfg.flow_filter)
    ports, protos = sorted(cfg.flow_filter.ports), sorted(cfg.flow_filter.protocols)
    keep = pl.col("proto").is_in(protos) & pl.col("dport").is_in(ports)
    kept = flows.filter(keep).sort(["start", "seq"])
    c.filtered_out = flows.height - kept.height
    c.kept = kept.height
    if kept.height == 0:
        return empty, c
    c.ssl_bytes_kept = int(kept["bytes"].sum())
    c.first_start = float(kept["start"][0])
    c.last_start = float(kept["start"][-1])
    named = kept.join(names, left_on="dst", right_on="address", how="left")
    if rdns.height:
        named = named.join(rdns, left_on="dst", right_on="address", how="left",
                           suffix="_rdns")
    else:
        named = named.with_columns(pl.lit(None, pl.String).alias("name_rdns"))
    named = named.with_columns(pl.coalesce("sni", "name", "name_rdns").alias("host"),
                               pl.when(pl.col("sni").is_not_null()).then(pl.lit("sni"))
                               .when(pl.col("name").is_not_null()).then(pl.lit("map"))
                               .otherwise(pl.lit("rdns")).alias("named_by"))
    c.unnamed_dropped = int(named["host"].null_count())
    named = named.filter(pl.col("host").is_not_null())
    c.named = named.height
    c.named_by = {str(k): int(v) for k, v in named["named_by"].value_counts().iter_rows()}
    c.ssl_bytes_named = int(named["bytes"].sum()) if named.height else 0
    named = (named.join(pseudonyms(named["src"].unique()), on="src", how="left")
             .join(targets, on="host", how="left")
             .with_columns(pl.coalesce("target_port", "dport").alias("port"),
                           pl.col("target_fingerprint").fill_null("").alias("fingerprint")))
    named = named.with_columns(_client_cache(named, cfg.client_cache_lifetime).alias("hit"))
    c.client_cache_hits = int(named["hit"].sum())
    c.notary_requests = named.height - c.client_cache_hits
    events = named.with_columns(
        pl.when(pl.col("hit")).then(pl.lit(KIND_CLIENT_HIT)).otherwise(pl.lit(KIND_REQUEST))
        .alias("kind"), pl.col("bytes").alias("ssl_bytes"))
    if not cfg.include_client_hits:
        events = events.filter(~pl.col("hit"))
    return events.select(list(EVENT_SCHEMA)).cast(EVENT_SCHEMA), c  # type: ignore[arg-type]


def _sum_counters(parts: Iterable[StageCounters]) -> StageCounters:
    total = StageCounters()
    for c in parts:
        for name in ("paired", "reverse_only", "filtered_out", "kept", "named",
                     "unnamed_dropped", "client_cache_hits", "notary_requests",
                     "ssl_bytes_kept", "ssl_bytes_named"):
            setattr(total, name, getattr(total, name) + getattr(c, name))
        for k, v in c.named_by.items():
            total.named_by[k] = total.named_by.get(k, 0) + v
        if c.first_start is not None:
            total.first_start = c.first_start if total.first_start is None else min(
                total.first_start, c.first_start)
        if c.last_start is not None:
            total.last_start = c.last_start if total.last_start is None else max(
                total.last_start, c.last_start)
    return total


# ------------------------------------------------------------------------ phase 3


WINDOW_EVENTS = 2_000_000  # events sorted in memory at once when merging spilled partitions


def _output_frame(events: pl.DataFrame, t0: float, parquet: bool) -> pl.DataFrame:
    # the CSV writer rounds to 6 decimals itself (as the reference's round(x, 6) does); an
    # empty fingerprint is an empty CSV field (as Python's csv writes it), not ""
    offset = pl.col("start") - t0
    return events.select(
        (offset.round(6) if parquet else offset).alias("offset"), "kind", "client", "host",
        "port", (pl.col("fingerprint") if parquet else pl.when(pl.col("fingerprint") != "")
                 .then(pl.col("fingerprint"))).alias("fingerprint"), "ssl_bytes")


def _write_events(parts: list[pl.DataFrame | Path], out: Path, t0: float,
                  bounds: tuple[float, float], total: int) -> None:
    """Merge the partitions' events, each sorted by (start, seq), into ``out`` in that
    order, through a temporary file in the same directory renamed at the end. Events held in
    memory are sorted at once; spilled ones (Parquet files) are merged window by window of
    start time, each window sorted in memory, so memory stays bounded."""
    parquet = out.suffix.lower() == ".parquet"
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if all(isinstance(p, pl.DataFrame) for p in parts):
            frames = [p for p in parts if isinstance(p, pl.DataFrame) and p.height]
            if len(frames) == 1:
                merged = frames[0]  # one partition: already in order
            else:
                merged = (pl.concat(frames) if frames else pl.DataFrame(schema=EVENT_SCHEMA)
                          ).sort(["start", "seq"])
            frame = _output_frame(merged, t0, parquet)
            if parquet:
                frame.write_parquet(tmp)
            else:
                frame.write_csv(tmp, float_precision=6)
        else:
            lf = pl.concat([pl.scan_parquet(p) if isinstance(p, Path) else p.lazy()
                            for p in parts])
            first, last = bounds
            windows = max(1, math.ceil(total / WINDOW_EVENTS))
            step = (last - first) / windows if last > first else 1.0
            edges = [first + i * step for i in range(windows)] + [math.inf]
            pieces: list[Path] = []
            with tmp.open("wb") as fh:
                for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
                    lo_expr = pl.col("start") >= lo if i else pl.lit(True)
                    window = lf.filter(lo_expr & (pl.col("start") < hi)).collect()
                    frame = _output_frame(window.sort(["start", "seq"]), t0, parquet)
                    if parquet:  # windows as pieces, concatenated in order below
                        pieces.append(tmp.with_name(f"{tmp.name}.{i}"))
                        frame.write_parquet(pieces[-1])
                    else:
                        frame.write_csv(fh, float_precision=6, include_header=i == 0)
            if parquet:
                pl.scan_parquet(pieces).sink_parquet(tmp, maintain_order=True)
                for piece in pieces:
                    piece.unlink(missing_ok=True)
        tmp.replace(out)
    except (OSError, pl.exceptions.PolarsError) as exc:
        tmp.unlink(missing_ok=True)
        raise ReplayIOError(f"cannot write {out}: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------ the whole


@dataclass
class Progress:
    """Flows read, flows/s and an ETA against the estimated total; ``emit`` None: quiet."""

    total_rows: int
    emit: Callable[[str], None] | None
    on_rows: Callable[[int], None] | None = None  # told the rows read so far, every batch
    every: float = 2.0
    rows: int = 0
    t0: float = field(default_factory=time.monotonic)
    _last: float = 0.0

    def add(self, rows: int) -> None:
        self.rows += rows
        if self.on_rows is not None:
            self.on_rows(self.rows)
        now = time.monotonic()
        if self.emit is None or now - self._last < self.every:
            return
        self._last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = self.rows / elapsed
        left = max(0, self.total_rows - self.rows)
        self.emit(f"workload: {self.rows:,} flows read, {rate:,.0f} flows/s"
                  + (f", about {left / rate:.0f} s to go" if rate > 0 and left else ""))


def _estimated_rows(src: Source) -> int:
    """Rows of an input, from its size and the mean length of its first lines."""
    try:
        with src.text.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return 0
    lines = head.count(b"\n")
    return int(src.size / (len(head) / lines)) if lines else 0


def build(inputs: list[Path], out: Path, cfg: EngineConfig, errors: ErrorLog,
          name_map: Mapping[str, str], targets: Mapping[str, Any],
          rdns: Callable[[list[str]], Mapping[str, str | None]] | None = None,
          fmt: str = "auto", nfdump_output: str = "fmt", tz: tzinfo = UTC,
          nfdump_filter: str | None = None, emit: Callable[[str], None] | None = None,
          work_dir: Path | None = None, progress: Progress | None = None,
          ) -> tuple[StageCounters, int]:
    """Inputs to the workload file ``out`` (``.parquet``: Parquet, else CSV); returns the
    stage counters and the number of rows written. ``emit``: progress lines (None: quiet),
    or ``progress`` to follow the rows read."""
    if cfg.jobs < 1:
        raise ReplayInputError("--jobs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="replay-workload-", dir=work_dir) as tmpname:
        work = Path(tmpname)
        sources = plan_sources(inputs, fmt, nfdump_output, work, tz, nfdump_filter)
        estimated = sum(_estimated_rows(src) for src in sources)
        count = max(cfg.jobs, min(MAX_PARTITIONS, math.ceil(estimated / PART_ROWS) or 1))
        if progress is None:
            progress = Progress(estimated, emit)
        counters = StageCounters()
        lossy: set[int] = set()
        while True:  # again, decoding leniently, when an input is not valid UTF-8
            saved = (errors.count, list(errors.messages))
            parts = Partitions(work / f"flows-{len(lossy)}", count, cfg.flow_filter)
            canon = Canonical()
            try:
                counters.flows_read = sum(
                    ingest_source(src, parts, canon, tz, errors, progress.add,
                                  src.index in lossy) for src in sources)
                break
            except NotUtf8 as exc:
                lossy.add(exc.index)
                errors.count, errors.messages = saved[0], saved[1]
        counters.malformed = errors.count
        rdns_map: Mapping[str, str | None] = {}
        if rdns is not None:
            rdns_map = rdns(_unnamed_destinations(parts, name_map))
        names_df = pl.DataFrame({"address": list(name_map), "name": list(name_map.values())},
                                schema={"address": pl.String, "name": pl.String})
        rdns_df = pl.DataFrame({"address": [a for a, n in rdns_map.items() if n],
                                "name": [n for n in rdns_map.values() if n]},
                               schema={"address": pl.String, "name": pl.String})
        targets_df = pl.DataFrame(
            {"host": list(targets), "target_port": [t.port for t in targets.values()],
             "target_fingerprint": [t.fingerprint for t in targets.values()]},
            schema={"host": pl.String, "target_port": pl.Int64,
                    "target_fingerprint": pl.String})
        cache: dict[str, str] = {}

        def pseudonyms(srcs: pl.Series) -> pl.DataFrame:
            values = srcs.to_list()
            for v in values:
                if v not in cache:
                    cache[v] = anonymise(v, cfg.salt)
            return pl.DataFrame({"src": values, "client": [cache[v] for v in values]},
                                schema={"src": pl.String, "client": pl.String})

        def one(p: int) -> tuple[pl.DataFrame | Path, StageCounters]:
            events, c = partition_events(parts.frame(p), cfg, names_df, rdns_df, targets_df,
                                         pseudonyms)
            if not parts.spilled:
                return events, c
            path = work / f"events-{p}.parquet"
            events.write_parquet(path, compression="lz4")
            return path, c

        with ThreadPoolExecutor(max_workers=cfg.jobs) as pool:
            results = list(pool.map(one, range(count)))
        total_c = _sum_counters(c for _, c in results)
        for name in ("paired", "reverse_only", "filtered_out", "kept", "named",
                     "unnamed_dropped", "client_cache_hits", "notary_requests",
                     "ssl_bytes_kept", "ssl_bytes_named", "first_start", "last_start",
                     "named_by"):
            setattr(counters, name, getattr(total_c, name))
        t0 = cfg.trace_start if cfg.trace_start is not None else (counters.first_start or 0.0)
        rows = counters.notary_requests + (counters.client_cache_hits
                                           if cfg.include_client_hits else 0)
        if emit is not None:
            emit(f"workload: {counters.flows_read:,} flows in "
                 f"{time.monotonic() - progress.t0:.1f} s; writing {rows:,} events to {out}")
        _write_events([e for e, _ in results], out, t0,
                      (counters.first_start or 0.0, counters.last_start or 0.0), rows)
        return counters, rows


def _unnamed_destinations(parts: Partitions, name_map: Mapping[str, str]) -> list[str]:
    """Destinations of kept flows with neither SNI nor a map entry (for reverse DNS)."""
    ports, protos = sorted(parts.filter.ports), sorted(parts.filter.protocols)
    known = pl.Series(list(name_map), dtype=pl.String)
    lf = (parts.scan()
          .filter(pl.col("proto").is_in(protos) & pl.col("dport").is_in(ports)
                  & pl.col("sni").is_null() & ~pl.col("dst").is_in(known))
          .select(pl.col("dst").unique()))
    return [str(x) for x in lf.collect()["dst"].to_list()]


def sha_key(path: Path) -> str:
    """A short digest of a workload file (tests and benchmarks compare outputs by it)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Stream a workload file (CSV or Parquet) as dicts, in batches."""
    lf = pl.scan_parquet(path) if path.suffix.lower() == ".parquet" else pl.scan_csv(
        path, infer_schema=False)
    for batch in lf.collect_batches(chunk_size=100_000):
        yield from batch.iter_rows(named=True)


__all__ = ["EngineConfig", "build", "expand_inputs", "iter_events", "plan_sources"]

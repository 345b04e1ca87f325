"""Phase 1, parsing: every field scanned as text, parsed by vectorised expressions for
its common form; the other rows are left to the reference parser (see the package)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from replay.columnar.schema import EPOCH_FRACTION_RE, EPOCH_RE
from replay.columnar.sources import Source
from replay.flows import (
    MAX_COUNT,
    PROTO_NAMES,
)


@dataclass(frozen=True)
class Forms:
    """Which form of a field a file mostly uses (from a sample of its first rows): the fast
    path parses that form only, and a row in another form is residue. ``strip``: fields are
    padded (nfdump's ``fmt`` output)."""

    epoch_times: bool = True
    numeric_proto: bool = True
    strip: bool = False
    # epoch times: every sampled one has a fraction (so no millisecond integers to scale)
    epoch_fraction: bool = False
    # date-and-time forms: the lengths sampled, of 19 (seconds), 23 (.fff), 26 (.ffffff)
    time_lengths: frozenset[int] = frozenset({19, 23, 26})


def _text(name: str, forms: Forms) -> pl.Expr:
    return pl.col(name).str.strip_chars() if forms.strip else pl.col(name)


def _int(name: str, forms: Forms, typed: bool) -> pl.Expr:
    """The field as an integer (null: not in the form both polars and Python's int() read).
    ``typed``: polars' reader has read it as one already (see :func:`_scan`)."""
    return pl.col(name) if typed else _text(name, forms).cast(pl.Int64, strict=False)


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
        if forms.epoch_fraction:  # a time without a fraction (milliseconds?) is residue
            return pl.when(t.str.contains(EPOCH_FRACTION_RE) & (v < 1e11)).then(v)
        ms = ~t.str.contains(".", literal=True) & (t.str.len_bytes() >= 13)
        v = pl.when(ms).then(_divide(v, 1000.0)).otherwise(v)
        return pl.when(t.str.contains(EPOCH_RE) & (v < 1e11)).then(v)
    # the seconds part has few distinct values (about one per second of trace): parsed once
    # each (strptime's cache); the fraction is plain digits. Only the lengths the file uses
    # are tried (every branch costs a pass over the column): another length is residue.
    n = t.str.len_bytes()
    # seconds only: a value of another length is residue (below), so no slice is needed
    whole = t if forms.time_lengths == {19} else t.str.slice(0, 19)
    seconds = whole.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S",
                                               strict=False, cache=True).dt.epoch("us")
    dot = t.str.slice(19, 1) == "."
    frac: Any = pl
    if 19 in forms.time_lengths:
        frac = frac.when(n == 19).then(pl.lit(0, pl.Int64))
    if 23 in forms.time_lengths:
        frac = frac.when((n == 23) & dot).then(
            t.str.slice(20, 3).cast(pl.Int64, strict=False) * 1000)
    if 26 in forms.time_lengths:
        frac = frac.when((n == 26) & dot).then(t.str.slice(20, 6).cast(pl.Int64, strict=False))
    if frac is pl:  # no form sampled: every length is residue
        frac = pl.lit(None, pl.Int64)
    # integer microseconds, the offset included, then seconds: the reference's arithmetic
    shift = int(round(offset * 1_000_000))
    if forms.time_lengths == {19} and shift % 1_000_000 == 0:
        # whole seconds and a whole-second offset: the seconds themselves, exactly (no
        # division, which the plan would evaluate once per use of this expression)
        whole_s = whole.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S", strict=False,
                                     cache=True).dt.epoch("s")
        return pl.when(n == 19).then(whole_s - shift // 1_000_000).cast(pl.Float64)
    us = (pl.when(n == 19).then(seconds - shift) if forms.time_lengths == {19}
          else pl.when(frac >= 0).then(seconds + frac - shift))
    return _divide(us.cast(pl.Float64), 1_000_000.0)


def _port(name: str, forms: Forms, typed: bool = False) -> pl.Expr:
    # polars reads only what Python's int() reads the same way (digits, a sign, leading
    # blanks); an ICMP type.code, trailing spaces or underscores go to the reference
    n = _int(name, forms, typed)
    return pl.when((n >= 0) & (n <= 65535)).then(n)


def _proto(name: str, forms: Forms) -> pl.Expr:
    t = _text(name, forms)
    if forms.numeric_proto:
        n = t.cast(pl.Int64, strict=False)
        return pl.when((n >= 0) & (n <= 255) & ~t.str.starts_with("+")).then(n)
    # the names as exporters print them (upper case); other spellings go to the reference.
    # A comparison per name: a sixth of the time of a lookup in a table of them
    proto: Any = pl
    for text, number in PROTO_NAMES.items():
        proto = proto.when(t == text).then(pl.lit(number, pl.Int64))
    number_of: pl.Expr = proto
    return number_of


def _count(name: str, forms: Forms, typed: bool = False) -> pl.Expr:
    n = _int(name, forms, typed)
    return pl.when((n >= 0) & (n <= MAX_COUNT)).then(n)


def _duration(name: str, forms: Forms, value: str | None = None) -> pl.Expr:
    """``value``: a column holding the field already read as a float (see the legacy layout
    in :func:`_fast_columns`)."""
    # what polars reads as a float, Python's float() reads the same (HH:MM:SS: residue)
    v = pl.col(value) if value else _text(name, forms).cast(pl.Float64, strict=False)
    return pl.when(v.is_finite() & (v >= 0)).then(v)


def _sum(terms: list[pl.Expr]) -> pl.Expr:
    """A sum that is null when a term is (``sum_horizontal`` would skip it)."""
    total = pl.lit(0, pl.Int64)
    for t in terms:
        total = total + t
    return total


SAMPLE_LINES = 1000

# polars' streaming CSV reader reads a file in chunks of 32 MiB by default, each in new
# memory: with 4 MiB chunks the whole command touches about 40,000 fewer pages and takes
# 0.05-0.1 s less CPU for 2 M flows (bench/replay/ingest_command.py). An explicit setting is
# kept.
os.environ.setdefault("POLARS_CSV_CHUNK_SIZE", str(4 * 1024 * 1024))
# Its line reader (ingest.irregular_rows) likewise: with 1 MiB chunks it touches 23,000
# fewer pages and takes 0.135 s instead of 0.19 s for 2 M lines (256 KiB to 4 MiB measured).
os.environ.setdefault("POLARS_NDJSON_CHUNK_SIZE", str(1024 * 1024))


def _forms(src: Source, time_col: int, end_col: int, proto_col: int) -> Forms:
    """The forms of the file's first rows (at most :data:`SAMPLE_LINES`); ``end_col`` -1:
    no end time column."""
    import csv as _csv
    import itertools

    times: list[str] = []
    protos: list[str] = []
    sep = "|" if src.layout == "nfdump-fmt" else ","
    with src.text.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        lines = itertools.islice(fh, 0 if src.layout == "nfdump-fmt" else 1, SAMPLE_LINES)
        rows = (line.split(sep) for line in lines) if sep == "|" else _csv.reader(lines)
        for row in rows:
            if len(row) > max(time_col, end_col, proto_col):
                times.append(row[time_col].strip())
                if end_col >= 0:
                    times.append(row[end_col].strip())
                protos.append(row[proto_col].strip())
    epochs = [t for t in times if re.fullmatch(EPOCH_RE, t)]
    numeric = sum(1 for p in protos if p.isdigit())
    lengths = frozenset(len(t) for t in times if not re.fullmatch(EPOCH_RE, t)) & {19, 23, 26}
    return Forms(epoch_times=len(epochs) * 2 >= max(1, len(times)),
                 numeric_proto=numeric * 2 >= max(1, len(protos)),
                 strip=src.layout == "nfdump-fmt",
                 epoch_fraction=bool(epochs) and all("." in t for t in epochs),
                 time_lengths=lengths or Forms.time_lengths)


@dataclass(frozen=True)
class FastColumns:
    """How one layout's rows are parsed on the fast path: ``exprs`` give the flow columns
    (null where the fast path does not apply), ``needed`` the columns a row needs (all
    non-null), ``checks`` further conditions that must hold, ``pre`` columns added to the
    scan before all of these (values they use more than once), and ``typed`` the columns
    polars' reader reads as integers (:func:`_scan`)."""

    exprs: list[pl.Expr]
    needed: list[str]
    checks: list[pl.Expr]
    pre: list[pl.Expr]
    typed: frozenset[str]


def _fast_columns(src: Source, offset: float, forms: Forms, typed_ints: bool = True,
                  ) -> FastColumns:
    """The fast path's parsing of one layout (see :class:`FastColumns`); ``typed_ints``:
    ports and counters read as integers by polars' reader."""
    checks: list[pl.Expr] = []
    pre: list[pl.Expr] = []
    idx = {h.strip(): i for i, h in enumerate(src.header)}
    typed: set[str] = set()

    def col(name: str) -> str:
        return f"column_{idx[name] + 1}" if src.header else name

    def text(c: str) -> pl.Expr:
        return _text(c, forms)

    # Ports and counters are read as integers by polars' reader, in the forms Python's int()
    # reads the same way (digits, a sign, leading zeros and blanks): 0.1 s less for 2 M
    # flows than text and a cast. It stops at any other form (ingest.NotTyped): the input is
    # read again as text, where such a field makes its row residue. Over-long fields never
    # reach the fast path (ingest.irregular_rows). Padded fields (nfdump's fmt output) are
    # read as text.
    def port(c: str) -> pl.Expr:
        if typed_ints and not forms.strip:
            typed.add(c)
        return _port(c, forms, c in typed)

    def count(c: str) -> pl.Expr:
        if typed_ints and not forms.strip:
            typed.add(c)
        return _count(c, forms, c in typed)

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
            # the duration is used twice: polars' common subexpressions would still read it
            # as a float three times (0.05-0.08 s for 2 M flows), so it is read once, before
            pre.append(td.cast(pl.Float64, strict=False).alias("_td"))
            duration = _duration(col("td"), forms, "_td")
            # max_horizontal skips a null term: without a duration (absent, or not a
            # number: then the check below sends the row to the residue) the end is te's
            end = pl.when(end.is_not_null()).then(pl.max_horizontal(end, ts + duration))
            checks.append(absent | duration.is_not_null())
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
        if "lastSeen" not in idx:  # the start is used twice: computed once, before
            pre.append(start.alias("_start"))
            start = pl.col("_start")
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
                 port(c[4]).alias("sport"), port(c[5]).alias("dport"),
                 _proto(c[6], forms).alias("proto"), count(c[7]).alias("packets"),
                 (count(c[8]) + count(c[9])).alias("bytes"),
                 pl.lit(None, pl.String).alias("sni_raw")]
        needed = c
    return FastColumns(exprs, needed, checks, pre, frozenset(typed))


def _key_columns(src: Source) -> tuple[int, int, int]:
    """The fields whose form decides the fast path: the start time, the end time (-1: none)
    and the protocol."""
    if src.layout == "nfdump-fmt":
        return 0, 1, 6
    idx = {h.strip(): i for i, h in enumerate(src.header)}
    t, e, p = {"canonical": ("start", "end", "proto"), "nfdump-legacy": ("ts", "te", "pr"),
               "nfdump-new": ("firstSeen", "lastSeen", "proto")}[src.layout]
    return idx[t], idx.get(e, -1), idx[p]


def _scan(src: Source, lossy: bool = False, typed: frozenset[str] = frozenset(),
          quoting: bool = False) -> tuple[pl.LazyFrame, list[str]]:
    """All the fields of every row, as text but the ``typed`` columns (integers: polars
    stops at a field that is not one; its ``ignore_errors`` would make it null, but costs
    0.13 s for 2 M flows), in file order (the ingest numbers the rows as they come, 0 =
    the first data line: a row index in the scan costs 2-4% of the read); fields beyond the
    header's are not read, on the first row too (the reference ignores them), and a first
    row with fewer fields than the header's has the rest null, as every other row. No quote
    character: every line is one row, as the reference reads lines, and a line with a quote
    is residue (ingest.irregular_rows); ``quoting``: '"' is the quote character, when every
    line with a quote has only whole fields quoted, with no quote inside (no quote joins
    two lines, and polars reads them as the reference does). ``lossy``:
    invalid UTF-8 replaced (the reference reads so; tried when strict fails)."""
    fmt = src.layout == "nfdump-fmt"
    width = 10 if fmt else len(src.header)
    names = [f"column_{i + 1}" for i in range(width)]
    schema = {n: pl.Int64 if n in typed else pl.String for n in names}
    lf = pl.scan_csv(src.text, has_header=False, skip_rows=0 if fmt else 1,
                     separator="|" if fmt else ",", infer_schema=False, schema=schema,
                     truncate_ragged_lines=True, extra_columns="ignore",
                     missing_columns="insert",
                     quote_char='"' if quoting else None,
                     encoding="utf8-lossy" if lossy else "utf8", raise_if_empty=False)
    return lf, names

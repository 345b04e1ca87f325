"""Phase 1, ingest: checked addresses and names, the residue rows, and the parsed flows
written to partitions by client (bounded memory, spilled to Parquet)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path

import polars as pl

from replay.columnar.parse import _fast_columns, _forms, _key_columns, _scan
from replay.columnar.schema import BATCH_ROWS, CANONICAL_IPV4_RE, FILE_SHIFT, FLOW_SCHEMA
from replay.columnar.sources import Source
from replay.errors import MalformedRow, ReplayInputError, ReplayIOError
from replay.flows import (
    MAX_FIELD_CHARS,
    FlowRecord,
    Layout,
    detect_layout,
    nfdump_fmt_layout,
    parse_address,
    parse_hostname,
)
from replay.ingest import MAX_LINE_CHARS, ErrorLog, _parse_lines
from replay.model import FlowFilter


@dataclass
class Canonical:
    """Distinct raw addresses and names, checked once each by the reference functions.
    Only the values that change (``changed``: raw -> canonical) or fail (``invalid``) are
    kept apart: most addresses are already canonical and cost nothing per row."""

    seen: set[str] = field(default_factory=set)
    changed: dict[str, str] = field(default_factory=dict)
    invalid: set[str] = field(default_factory=set)
    names: dict[str, str | None] = field(default_factory=dict)
    # the distinct source addresses of each batch and of the residue, as read (see sources())
    read_sources: list[pl.Series] = field(default_factory=list)

    def learn_addresses(self, raw: pl.Series, sources: bool = False) -> None:
        """Check the distinct values of ``raw``; ``sources``: they are source addresses
        (kept for :meth:`sources`)."""
        values = raw.unique().drop_nulls()
        if sources:
            self.add_sources(values)
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

    def add_sources(self, values: pl.Series) -> None:
        """Source addresses read (as read, or canonical: both are mapped by :meth:`sources`)."""
        self.read_sources.append(values)

    def sources(self) -> pl.Series:
        """Every distinct source address of the flows read, in canonical form (a superset of
        the clients of any subset of them whose sources were not swapped with destinations)."""
        if not self.read_sources:
            return pl.Series("src", [], pl.String)
        values = pl.concat(self.read_sources).unique()
        if self.invalid:
            values = values.filter(~values.is_in(list(self.invalid)))
        if self.changed:
            values = values.replace(self.changed).unique()
        return values.alias("src")

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
        df = df.select(list(FLOW_SCHEMA)).cast(FLOW_SCHEMA)  # type: ignore[arg-type]
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

    def take(self, p: int) -> pl.DataFrame:
        """Partition ``p``'s flows, no longer held here, so that they are freed once its events
        are made (writing the workload then reuses their memory: 6,000 fewer first touches of
        a page for 2 M flows)."""
        frame = self.frame(p)
        self.held[p] = []
        return frame

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


# A line whose every field is either plain (no quote) or wholly quoted with no quote inside:
# Python's csv module and polars' quoting read it the same way
SIMPLE_QUOTES_RE = r'^(?:"[^"]*"|[^",]*)(?:,(?:"[^"]*"|[^",]*))*$'
# ... and with no comma inside a quoted field either: split at every comma, its fields are
# the reference's, quotes added (the bound on a field's length can be checked so)
NO_QUOTED_COMMA_RE = r'^(?:"[^",]*"|[^",]*)(?:,(?:"[^",]*"|[^",]*))*$'


@dataclass(frozen=True)
class LinePass:
    """What the one pass over an input's lines found (:func:`irregular_rows`)."""

    rows: list[int]  # left to the reference parser, in order
    quoting: bool = False  # polars reads with '"' as its quote character (see _scan)


def irregular_rows(src: Source, lossy: bool = False) -> LinePass | None:
    """The rows the fast path leaves to the reference parser whatever their fields say, in
    order; None: the whole input is read by the reference (:func:`_reference_rows`).

    - A field over MAX_FIELD_CHARS characters or a line over MAX_LINE_CHARS, in a column
      the fast path never reads or beyond the header's: the reference refuses the whole row
      (only lines over MAX_FIELD_CHARS bytes are split to look).
    - A line with a quote (CSV layouts): the reference's CSV reader may split it otherwise
      than at every comma. Unless every line with a quote is in the simple form
      (:data:`SIMPLE_QUOTES_RE`): then polars reads with quoting (no quote can join two
      lines, and each is read as the reference reads it, see :func:`_scan`). Some exporters
      quote every field: those stay on the fast path. A long line with a comma inside
      quotes is the reference's (its fields' lengths are not checked here).
    - A carriage return left in a line, or a header that is not the first line: the
      reference's line numbers would not be the scan's rows (its reading also ends a line at
      a lone carriage return), so the whole input is read by the reference.

    One pass over the lines (polars', or Python's when the input is not valid UTF-8): about
    0.135 s for 2 M flows of the nfdump legacy layout; lines with a quote cost more."""
    fmt = src.layout == "nfdump-fmt"
    if not fmt and src.header_line != 1:
        return None
    first = 0 if fmt else 1  # the line of row 0
    if lossy:  # the reference replaces invalid bytes: each is one character, so more bytes
        return _irregular_rows_bytes(src, first)
    line = pl.col("line")
    odd = line.str.contains("\r" if fmt else '["\r]')
    # a long line without a quote is split as the reference splits it: only a field or a
    # line over the reference's bounds (in characters) makes it irregular. A simple quoted
    # field's length counts its quotes: more than the reference's, never less
    longest = (line.str.split("|" if fmt else ",")
               .list.eval(pl.element().str.len_chars()).list.max())
    over = (longest > MAX_FIELD_CHARS) | (line.str.len_chars() > MAX_LINE_CHARS)
    if not fmt:  # a quoted comma would hide a field's length from the split
        over = over | (line.str.contains('"', literal=True)
                       & ~line.str.contains(NO_QUOTED_COMMA_RE))
    rows: list[int] = []
    quotes: list[pl.Series] = []  # lines with a quote: the reference's unless all simple
    all_simple = True  # polars' quoting may join lines or raise on any other form
    try:
        # the split only on the lines found long, batch by batch (in one plan polars would
        # split every line: 1.9 s instead of 0.14 s for 2 M lines)
        for batch in (pl.scan_lines(src.text).with_row_index("row")
                      .filter((line.str.len_bytes() > MAX_FIELD_CHARS) | odd)
                      .collect_batches(chunk_size=BATCH_ROWS)):
            if batch["line"].str.contains("\r", literal=True).any():
                return None
            long = batch.filter(line.str.len_bytes() > MAX_FIELD_CHARS)
            if long.height:
                rows += [r - first for r in long.filter(over)["row"].to_list() if r >= first]
            if fmt:  # no quoting in nfdump's fmt output
                continue
            quoted = batch.filter(line.str.contains('"', literal=True))
            if not quoted.height:
                continue
            # the form checked until one line is not in it (about 0.5 ns a byte)
            all_simple = all_simple and bool(
                quoted["line"].str.contains(SIMPLE_QUOTES_RE).all())
            quotes.append(quoted["row"])  # numbers held by polars: 4 bytes a line
    except pl.exceptions.ComputeError as exc:
        if "utf" in str(exc).lower():
            raise NotUtf8(src.index) from exc
        raise ReplayInputError(f"{src.display}: {str(exc).splitlines()[0]}") from exc
    if quotes and all_simple:
        return LinePass(rows, quoting=True)
    if quotes:
        lines = pl.concat(quotes).to_list()
        return LinePass(sorted(set(rows).union(r - first for r in lines if r >= first)))
    return LinePass(rows)


def _irregular_rows_bytes(src: Source, first: int) -> LinePass | None:
    """:func:`irregular_rows` for an input that is not valid UTF-8, line by line (every
    line with a quote is the reference's)."""
    odd = b"\r" if src.layout == "nfdump-fmt" else b'"'
    rows = []
    try:
        with src.text.open("rb") as fh:
            for number, raw in enumerate(fh):
                body = raw.removesuffix(b"\n").removesuffix(b"\r")
                if b"\r" in body:
                    return None
                if number >= first and (len(body) > MAX_FIELD_CHARS or odd in body):
                    rows.append(number - first)
    except OSError as exc:
        raise ReplayIOError(f"cannot read {src.text}: {exc}") from exc
    return LinePass(rows)


def _reference_rows(src: Source, tz: tzinfo, errors: ErrorLog,
                    ) -> Iterator[list[tuple[int, FlowRecord]]]:
    """Every row of the input by the reference's reading and parser, in batches."""
    fmt = src.layout == "nfdump-fmt"
    try:
        fh = src.text.open("r", encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise ReplayIOError(f"cannot open {src.text}: {exc}") from exc
    batch: list[tuple[int, FlowRecord]] = []
    with fh:
        records = _parse_lines(fh, src.display, nfdump_fmt_layout() if fmt else None,
                               "|" if fmt else ",", errors, tz)
        for i, rec in enumerate(records):
            batch.append((i, rec))
            if len(batch) >= BATCH_ROWS:
                yield batch
                batch = []
    yield batch


def _records_frame(src: Source, recs: list[tuple[int, FlowRecord]]) -> pl.DataFrame:
    base = src.index << FILE_SHIFT
    return pl.DataFrame(
        {"seq": [base + r for r, _ in recs], "start": [x.start for _, x in recs],
         "end": [x.end for _, x in recs], "src": [x.src for _, x in recs],
         "dst": [x.dst for _, x in recs], "sport": [x.sport for _, x in recs],
         "dport": [x.dport for _, x in recs], "proto": [x.proto for _, x in recs],
         "bytes": [x.bytes for _, x in recs],
         "sni": [x.sni for _, x in recs]}, schema=FLOW_SCHEMA)


class ReadAgain(Exception):
    """An input must be read again in a slower way (see the subclasses)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class NotUtf8(ReadAgain):
    """An input is not valid UTF-8 where the strict (faster) decoder read it."""


class NotTyped(ReadAgain):
    """A port or counter of an input is not an integer polars' reader reads: the input is
    read again with those fields as text."""


def _batches(src: Source, parsed: pl.LazyFrame, typed: bool) -> Iterator[pl.DataFrame]:
    try:
        yield from parsed.collect_batches(chunk_size=BATCH_ROWS)
    except pl.exceptions.ComputeError as exc:
        message = str(exc)
        if "utf" in message.lower():
            raise NotUtf8(src.index) from exc
        if typed and message.startswith("could not parse"):
            raise NotTyped(src.index) from exc
        raise ReplayInputError(f"{src.display}: {message.splitlines()[0]}") from exc


def ingest_source(src: Source, parts: Partitions, canon: Canonical, tz: tzinfo,
                  errors: ErrorLog, progress: Callable[[int], None], lossy: bool = False,
                  typed: bool = True) -> int:
    """Phase 1 for one input; returns the number of flow records (``flows_read``).
    ``lossy``: decode invalid UTF-8 as replacement characters (slower; the reference's
    reading), else raise :class:`NotUtf8` at the first invalid byte. ``typed``: ports and
    counters read as integers, else as text; raises :class:`NotTyped` at the first field
    polars' reader does not read as one."""
    if src.from_nfdump:  # printed in UTC (TZ=UTC): the reference reads it so, whatever
        tz = UTC         # zone the traces' own text is in
    offset = 0.0
    if src.layout != "nfdump-fmt":
        probe = tz.utcoffset(None)
        offset = probe.total_seconds() if probe is not None else 0.0
    lines = irregular_rows(src, lossy)
    if lines is None:
        return _reference_source(src, parts, canon, tz, errors, progress)
    irregular = lines.rows
    forms = _forms(src, *_key_columns(src))
    fast = _fast_columns(src, offset, forms, typed)
    lf, names = _scan(src, lossy, fast.typed, lines.quoting)
    checks, pre = fast.checks, fast.pre
    # No length checks here: a line that could hold an over-long field is residue
    # (irregular_rows), where the reference checks it.
    # every column the layout needs feeds a parsed column that is null when it is (fast_ok
    # below checks those): only the layout's further checks are added here
    complete = pl.all_horizontal(checks) if checks else pl.lit(True)
    # nfdump <= 1.7.4 ends its CSV with a "Summary" block: the reference stops there
    summary = (pl.col(names[0]).str.starts_with("Summary") if src.layout.startswith("nfdump")
               else pl.lit(False))
    parsed = (lf.with_columns(pre) if pre else lf).select(
        *fast.exprs, complete.alias("_complete"), summary.alias("_summary"))
    fast_ok = pl.all_horizontal([pl.col(c).is_not_null() for c in (
        "start", "end", "sport", "dport", "proto", "packets", "bytes", "src_raw", "dst_raw")])
    parsed = parsed.with_columns(
        (pl.col("_complete") & fast_ok & (pl.col("end") >= pl.col("start"))).alias("_ok"))
    residue: set[int] = set()
    flows = 0
    stop: int | None = None
    base = src.index << FILE_SHIFT
    first_row = 0  # the batches come in file order, every line a row
    for batch in _batches(src, parsed, bool(fast.typed)):
        batch = batch.with_row_index("row", offset=first_row)
        first_row += batch.height
        marked = irregular[bisect_left(irregular, first_row - batch.height):
                           bisect_left(irregular, first_row)]
        if marked:
            batch = batch.with_columns(pl.col("_ok") & ~pl.col("row").is_in(marked))
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
            canon.learn_addresses(ok["src_raw"], sources=True)
            canon.learn_addresses(ok["dst_raw"])
            sni = pl.lit(None, pl.String)
            named = ok["sni_raw"].null_count() < ok.height
            if named:  # only then: a column of empty fields costs nothing more
                ok = ok.with_columns(_hostname_fast(pl.col("sni_raw")).alias("sni_raw"))
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
    _write_records(src, recs, parts, canon)
    return flows + len(recs)


def _write_records(src: Source, recs: list[tuple[int, FlowRecord]], parts: Partitions,
                   canon: Canonical) -> None:
    parts.write(_records_frame(src, recs))
    canon.add_sources(pl.Series([x.src for _, x in recs], dtype=pl.String))


def _reference_source(src: Source, parts: Partitions, canon: Canonical, tz: tzinfo,
                      errors: ErrorLog, progress: Callable[[int], None]) -> int:
    """Phase 1 for an input the fast path cannot number as the reference does
    (:func:`irregular_rows`): every row by the reference."""
    flows = 0
    for recs in _reference_rows(src, tz, errors):
        _write_records(src, recs, parts, canon)
        progress(len(recs))
        flows += len(recs)
    return flows

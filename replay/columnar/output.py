"""Phase 3: merge the partitions' events by time into the workload file; read it back."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import polars as pl

from replay.columnar.schema import EVENT_SCHEMA
from replay.errors import ReplayIOError

WINDOW_EVENTS = 2_000_000  # events sorted in memory at once when merging spilled partitions
# rows the CSV writer formats at a time (polars' default is 1,024): 0.28 s instead of
# 0.33-0.39 s for a million events, the same bytes
CSV_BATCH_ROWS = 65_536


OFFSET_DTYPE = pl.Decimal(38, 6)


def _csv_offsets(offset: pl.Series) -> pl.Series | None:
    """The offsets as decimals of 6 places, each the reference's ``f"{round(x, 6):.6f}"`` of
    the float ``x``: the CSV writer prints a decimal as its digits, about a fifth of the time
    of formatting a float to 6 places (``float_precision``, exact but slow). polars' cast
    rounds ``x * 1e6``, which can differ from the exact rounding of ``x`` only where that
    product lies within a few units in its last place of a half: those rows (none of the
    synthetic hour's 2 M; 37 of the test's 4,000 offsets with digits below the microsecond)
    are printed by Python. None: a negative offset (its
    sign may survive rounding, "-0.000000", which a decimal cannot hold) or one the cast
    cannot hold: the caller prints floats."""
    if offset.len() == 0:
        return offset.cast(OFFSET_DTYPE)
    if not bool(offset.is_finite().all()) or bool(
            (offset < 0).any() or ((offset == 0) & (1.0 / offset < 0)).any()):
        return None
    decimals = offset.cast(OFFSET_DTYPE, strict=False)
    if decimals.null_count():
        return None
    scaled = offset * 1e6
    # the product is within half a unit in its last place of the exact one; 2**-46 of it is
    # 64 such units, and 2**-30 covers the products below 1 (a quarter of a microsecond)
    near_half = ((scaled - scaled.floor() - 0.5).abs()
                 <= scaled.abs() * 2.0 ** -46 + 2.0 ** -30)
    rows = near_half.arg_true()
    if rows.len():
        exact = pl.Series([f"{round(x, 6):.6f}" for x in offset.gather(rows).to_list()])
        decimals = decimals.scatter(rows, exact.cast(OFFSET_DTYPE))
    return decimals


def _output_frame(events: pl.DataFrame, t0: float, parquet: bool) -> tuple[pl.DataFrame, bool]:
    """The workload's columns, and whether the offsets are floats still to be printed to 6
    places by the CSV writer (as the reference's round(x, 6) and ``.6f`` do); an empty
    fingerprint is an empty CSV field (as Python's csv writes it), not ""."""
    offset = events["start"] - t0
    decimals = None if parquet else _csv_offsets(offset)
    out = events.select(
        (offset.round(6) if parquet else offset if decimals is None else decimals)
        .alias("offset"), "kind", "client", "host", "port",
        (pl.col("fingerprint") if parquet else pl.when(pl.col("fingerprint") != "")
         .then(pl.col("fingerprint"))).alias("fingerprint"), "ssl_bytes")
    return out, not parquet and decimals is None


NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def plain_text(values: Iterable[str]) -> bool:
    """Whether no value needs quoting in CSV (a separator, a quote or a line break)."""
    return NEEDS_QUOTES.search("\x00".join(values)) is None


def _write_csv(frame: pl.DataFrame, floats: bool, target: Path | IO[bytes],
               header: bool = True, plain: bool = False) -> None:
    """``plain``: no text in ``frame`` needs quoting (:func:`plain_text` of every value its
    text columns can hold): the writer then skips looking for what would (a third of its
    time), and writes the same bytes."""
    frame.write_csv(target, float_precision=6 if floats else None, include_header=header,
                    batch_size=CSV_BATCH_ROWS, quote_style="never" if plain else "necessary")


def write_events(parts: list[pl.DataFrame | Path], out: Path, t0: float,
                  bounds: tuple[float, float], total: int, plain: bool = False) -> None:
    """Merge the partitions' events, each sorted by (start, seq), into ``out`` in that
    order, through a temporary file in the same directory renamed at the end. Events held in
    memory are sorted at once; spilled ones (Parquet files) are merged window by window of
    start time, each window sorted in memory, so memory stays bounded. ``plain``: no text of
    the events needs quoting in CSV (see :func:`_write_csv`)."""
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
            frame, floats = _output_frame(merged, t0, parquet)
            if parquet:
                frame.write_parquet(tmp)
            else:
                _write_csv(frame, floats, tmp, plain=plain)
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
                    frame, floats = _output_frame(window.sort(["start", "seq"]), t0, parquet)
                    if parquet:  # windows as pieces, concatenated in order below
                        pieces.append(tmp.with_name(f"{tmp.name}.{i}"))
                        frame.write_parquet(pieces[-1])
                    else:
                        _write_csv(frame, floats, fh, header=i == 0, plain=plain)
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

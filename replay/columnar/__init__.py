"""Flows to a workload on a columnar engine (polars: lazy scans, streaming batches).

The per-row pipeline of :mod:`replay.reference` is the reference: this module computes the same
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

import itertools
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any

import polars as pl

from replay.columnar.events import partition_events, sum_counters
from replay.columnar.ingest import (
    Canonical,
    NotUtf8,
    Partitions,
    ReadAgain,
    ingest_source,
)
from replay.columnar.output import iter_events, plain_text, sha_key, write_events
from replay.columnar.schema import MAX_PARTITIONS, ONE_PART_ROWS, PART_ROWS, EngineConfig
from replay.columnar.sources import Source, expand_inputs, plan_sources
from replay.errors import ReplayInputError
from replay.ingest import ErrorLog
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, StageCounters, anonymise


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
          emit: Callable[[str], None] | None = None, progress: Progress | None = None,
          ) -> tuple[StageCounters, int]:
    """Inputs to the workload file ``out`` (``.parquet``: Parquet, else CSV); returns the
    stage counters and the number of rows written. ``emit``: progress lines (None: quiet),
    or ``progress`` to follow the rows read."""
    if cfg.jobs < 1:
        raise ReplayInputError("--jobs must be at least 1")
    tz, name_map, targets = cfg.tz, cfg.name_map, cfg.targets
    with tempfile.TemporaryDirectory(prefix="replay-workload-", dir=cfg.work_dir) as tmpname:
        work = Path(tmpname)
        sources = plan_sources(inputs, cfg.input_format, cfg.nfdump_output, work, tz,
                               cfg.nfdump_filter)
        estimated = sum(_estimated_rows(src) for src in sources)
        count = max(cfg.jobs, min(MAX_PARTITIONS, math.ceil(estimated / PART_ROWS) or 1))
        if cfg.jobs == 1 and estimated <= ONE_PART_ROWS:
            count = 1  # one job: no hashing into partitions, and nothing to merge
        if progress is None:
            progress = Progress(estimated, emit)
        counters = StageCounters()
        lossy: set[int] = set()
        text: set[int] = set()
        # again, decoding leniently when an input is not valid UTF-8, and reading its ports
        # and counters as text when one is not an integer polars reads
        for attempt in itertools.count():
            saved = (errors.count, list(errors.messages), progress.rows)
            parts = Partitions(work / f"flows-{attempt}", count, cfg.flow_filter)
            canon = Canonical()
            try:
                counters.flows_read = sum(
                    ingest_source(src, parts, canon, tz, errors, progress.add,
                                  src.index in lossy, src.index not in text)
                    for src in sources)
                break
            except ReadAgain as exc:
                again = lossy if isinstance(exc, NotUtf8) else text
                if exc.index in again:  # already read that way: a defect, not a loop
                    raise RuntimeError(f"input {exc.index} asked twice for {exc!r}") from exc
                again.add(exc.index)
                # read again from the start: what was counted is counted once
                errors.count, errors.messages, progress.rows = saved
        counters.malformed = errors.count
        rdns_map: Mapping[str, str | None] = {}
        if cfg.rdns is not None:
            rdns_map = cfg.rdns(_unnamed_destinations(parts, name_map))
        names_df = pl.DataFrame({"address": list(name_map), "name": list(name_map.values())},
                                schema={"address": pl.String, "name": pl.String})
        # one number per distinct name (the client cache's key packs it)
        names_df = names_df.with_columns(pl.col("name").rank("dense").alias("name_id"))
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

        # one partition: its flows' sources are all the sources read
        read_sources = canon.sources() if count == 1 else None

        def one(p: int) -> tuple[pl.DataFrame | Path, StageCounters]:
            events, c = partition_events(parts.take(p), cfg, names_df, rdns_df, targets_df,
                                         pseudonyms, read_sources)
            if not parts.spilled:
                return events, c
            path = work / f"events-{p}.parquet"
            events.write_parquet(path, compression="lz4")
            return path, c

        with ThreadPoolExecutor(max_workers=cfg.jobs) as pool:
            results = list(pool.map(one, range(count)))
        total_c = sum_counters(c for _, c in results)
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
        # the events' text: clients (hex), kinds (two words), hosts (names from the map, SNI
        # or reverse DNS) and the farm's fingerprints
        plain = plain_text(chain(name_map.values(), (n for n in rdns_map.values() if n),
                                 (n for n in canon.names.values() if n),
                                 (t.fingerprint for t in targets.values()),
                                 (KIND_REQUEST, KIND_CLIENT_HIT)))
        write_events([e for e, _ in results], out, t0,
                     (counters.first_start or 0.0, counters.last_start or 0.0), rows, plain)
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


def make_workload(inputs: list[Path], output: Path, cfg: EngineConfig, errors: ErrorLog, *,
                  names: Path | None = None, targets: Path | None = None,
                  stages: Path | None = None, info: Mapping[str, Any] | None = None,
                  emit: Callable[[str], None] | None = None, progress: Progress | None = None,
                  ) -> tuple[StageCounters, int, Path]:
    """One engine run from options, as ``replay workload`` and ``replay reproduce`` make it:
    the name map and the farm's targets read from their files into ``cfg``, the workload
    written to ``output`` and the stage counts to ``stages`` (default
    ``OUTPUT.stages.json``) with ``info``. Returns (counters, rows, the stages file)."""
    from replay.workload import read_name_map, read_targets, write_stages

    cfg = replace(cfg, name_map=read_name_map(names, errors) if names else cfg.name_map,
                  targets=read_targets(targets) if targets else cfg.targets)
    counters, rows = build(inputs, output, cfg, errors, emit=emit, progress=progress)
    stages = stages or output.with_name(output.name + ".stages.json")
    write_stages(counters, stages, {"malformed_examples": errors.messages[:20],
                                    "inputs": [str(p) for p in expand_inputs(inputs)],
                                    "engine": "columnar (polars)", "jobs": cfg.jobs,
                                    "cpus": _cpus(), **(info or {})})
    return counters, rows, stages


def _cpus() -> list[int] | None:
    """The CPUs this process may run on (None where the system does not say)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return sorted(getaffinity(0)) if getaffinity else None


__all__ = ["Canonical", "EngineConfig", "Partitions", "Progress", "Source", "build",
           "expand_inputs", "ingest_source", "iter_events", "make_workload", "plan_sources",
           "sha_key"]

"""The engine's configuration, constants and schemas (shared by every phase)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path

import polars as pl

from replay.model import FlowFilter, Target

BATCH_ROWS = 1_000_000
# flows per partition: phase 2 holds a partition and its joins and sorts (a few times its
# size) per job, so this bounds memory (bench/replay/ingest.py --big-flows)
PART_ROWS = 1_000_000
# one job holds up to this many flows in one partition (the whole command's peak RSS is about
# 0.6 GB at 2 M flows, bench/results/ingest-command.json): hashing flows into partitions and
# merging their events back cost about a fifth of such a run's CPU time
ONE_PART_ROWS = 2_200_000
MAX_PARTITIONS = 4096
PAIR_SLACK = 2.0
FILE_SHIFT = 40  # seq = file index << 40 | row index: arrival order across files

EPOCH_RE = r"^\d+(\.\d+)?$"
EPOCH_FRACTION_RE = r"^\d+\.\d+$"
DATETIME_RE = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6})?$"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
CANONICAL_IPV4_RE = rf"^{_OCTET}(\.{_OCTET}){{3}}$"

# the flows as phase 2 needs them: a row's packets are checked when it is parsed but never
# used after, and ports and protocols are stored in the widths their checks allow (for 2 M
# flows, 120 instead of 175 MB held until phase 2)
FLOW_SCHEMA = {"seq": pl.Int64, "start": pl.Float64, "end": pl.Float64, "src": pl.String,
               "dst": pl.String, "sport": pl.UInt16, "dport": pl.UInt16, "proto": pl.UInt8,
               "bytes": pl.Int64, "sni": pl.String}
EVENT_SCHEMA = {"start": pl.Float64, "seq": pl.Int64, "kind": pl.String, "client": pl.String,
                "host": pl.String, "port": pl.Int64, "fingerprint": pl.String,
                "ssl_bytes": pl.Int64}


@dataclass(frozen=True)
class EngineConfig:
    """Everything that decides a run of the engine, but its inputs and its output file."""

    # which flows become events, and how
    flow_filter: FlowFilter = FlowFilter()
    client_cache_lifetime: float | None = None
    salt: bytes = b"converge-replay"
    include_client_hits: bool = True
    trace_start: float | None = None
    # what names destinations and what the farm's targets are
    name_map: Mapping[str, str] = field(default_factory=dict)
    targets: Mapping[str, Target] = field(default_factory=dict)
    rdns: Callable[[list[str]], Mapping[str, str | None]] | None = None
    # how the inputs are read
    input_format: str = "auto"  # auto | nfdump | csv
    nfdump_output: str = "fmt"  # how nfdump prints capture files: fmt | csv
    nfdump_filter: str | None = None  # an nfdump filter expression
    tz: tzinfo = UTC  # of naive timestamps in CSV inputs
    # how it runs
    jobs: int = 1
    work_dir: Path | None = None

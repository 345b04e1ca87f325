"""``replay workload``: turn flow files into a workload file."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

from replay.cli.common import int_set, run_async
from replay.errors import ReplayInputError
from replay.flows import utc_offset_zone
from replay.ingest import ErrorLog, stderr_emit


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("workload", help="turn flow files into a workload file",
                       description="Filter, name and client-cache flows into a workload of "
                       "timed validation requests (docs/replay.md).")
    w.add_argument("inputs", type=Path, nargs="+",
                   help="flow files: nfdump captures (a directory or a glob of nfcapd.* files "
                   "is one trace, in time order), nfdump CSV or canonical CSV")
    w.add_argument("-o", "--output", type=Path, required=True,
                   help="workload file to write: CSV, or Parquet when it ends in .parquet "
                   "(required)")
    w.add_argument("--jobs", type=int, default=0,
                   help="cores to use (default: all of them); fewer than the machine's: the "
                   "command is held to that many CPUs, the one it starts on first")
    w.add_argument("--any-cpu", action="store_true",
                   help="let the command's threads run on any CPU whatever --jobs says "
                   "(default: held to --jobs CPUs)")
    w.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (default: flows read, flows/s and time to go)")
    w.add_argument("--names", type=Path, help="address-to-name map (default: none)")
    w.add_argument("--targets", type=Path,
                   help="farm targets.csv (port, fingerprint) (default: none)")
    w.add_argument("--format", choices=("auto", "nfdump", "csv"), default="auto",
                   help="input format (default: %(default)s, from the file's content)")
    w.add_argument("--nfdump-output", choices=("fmt", "csv"), default="fmt",
                   help="how nfdump prints capture files (default: %(default)s)")
    w.add_argument("--nfdump-filter", default=None,
                   help="filter expression passed to nfdump (default: none)")
    w.add_argument("--ports", default="443",
                   help="destination ports kept, comma-separated (default: %(default)s)")
    w.add_argument("--protocols", default="6",
                   help="IP protocol numbers kept, comma-separated (default: %(default)s, TCP)")
    w.add_argument("--client-cache-lifetime", type=float, default=None,
                   help="seconds a client keeps a validated site (default: the whole trace, "
                   "as the study)")
    w.add_argument("--no-client-hits", action="store_true",
                   help="leave client-cache hits out of the file (default: keep them)")
    w.add_argument("--tz-offset", type=float, default=0.0,
                   help="hours east of UTC for naive timestamps in CSV inputs "
                   "(default: %(default)s)")
    w.add_argument("--salt", default="converge-replay",
                   help="key of the BLAKE2b that anonymises client addresses "
                   "(default: %(default)s)")
    w.add_argument("--strict", action="store_true",
                   help="stop at the first malformed row (default: count and skip)")
    w.add_argument("--stages", type=Path,
                   help="stage counts JSON to write (default: OUTPUT.stages.json)")
    w.add_argument("--rdns", action="store_true",
                   help="reverse-DNS destinations that SNI and the map did not name "
                   "(default: off)")
    w.add_argument("--rdns-cache", type=Path,
                   help="reverse-DNS cache CSV (default: the output path with suffix .rdns.csv)")
    w.add_argument("--rdns-concurrency", type=int, default=64,
                   help="reverse lookups in flight (default: %(default)s)")
    w.add_argument("--rdns-timeout", type=float, default=2.0,
                   help="seconds per reverse lookup (default: %(default)s)")
    w.add_argument("--rdns-max", type=int, default=100_000,
                   help="distinct addresses looked up at most (default: %(default)s)")
    w.set_defaults(func=run)


def _current_cpu() -> int | None:
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return None


def hold_to_cpus(count: int) -> set[int] | None:
    """Hold this process (its threads now, and so the threads they start) to ``count`` of
    the CPUs it may run on, the one it runs on first. None: nothing changed (it may run on
    no more CPUs than that, or the system cannot say).

    The engine's helper threads (polars' reader and executor, the allocator's) otherwise
    run beside the main thread on another CPU: for 2 M flows on two CPUs the command took
    0.1-0.4 s more CPU (the data they make read on the other CPU), and took a second CPU from
    whatever ran beside it. The kernel still moves other, unheld work off the chosen CPUs."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    setaffinity = getattr(os, "sched_setaffinity", None)
    if getaffinity is None or setaffinity is None:
        return None
    allowed = sorted(getaffinity(0))
    if count >= len(allowed):
        return None
    here = _current_cpu()
    first = allowed.index(here) if here in allowed else 0
    chosen = {allowed[(first + i) % len(allowed)] for i in range(count)}
    for tid in os.listdir("/proc/self/task"):
        try:
            setaffinity(int(tid), chosen)
        except OSError:  # a thread that has just ended
            continue
    return chosen


def run(a: argparse.Namespace) -> int:

    jobs = a.jobs or os.cpu_count() or 1
    if jobs < 1:
        raise ReplayInputError("--jobs must be at least 1")
    if getattr(a, "whole_process", False) and not getattr(a, "any_cpu", False):
        hold_to_cpus(jobs)  # before polars starts its threads: they inherit it
    # the engine's thread pool is sized when it is first imported in this process
    os.environ.setdefault("POLARS_MAX_THREADS", str(jobs))
    from replay import columnar
    from replay.model import FlowFilter

    if getattr(a, "whole_process", False):
        # what the imports made (polars' classes and functions above all) lives as long as
        # the process: out of the cyclic collector's sight, neither its collections during
        # the run nor the one at exit walk it (for 2 M flows the collector took 14 ms
        # instead of 35-47 ms, and 0.1 ms instead of 8-15 ms at exit; the command 0.1 s
        # less CPU in 5 paired pinned runs). Not when called in another program's process,
        # whose objects would never be collected after.
        gc.freeze()
    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    flt = FlowFilter(int_set(a.protocols), int_set(a.ports))
    rdns = None
    if a.rdns:
        from replay.rdns import load_cache, resolve_many, save_cache

        cache_path = a.rdns_cache or a.output.with_suffix(".rdns.csv")

        def rdns(addresses: list[str]) -> dict[str, str | None]:
            cache = load_cache(cache_path)
            run_async(resolve_many(addresses, cache, a.rdns_concurrency, a.rdns_timeout,
                                    a.rdns_max))
            save_cache(cache_path, cache)
            return cache

    config = columnar.EngineConfig(
        flow_filter=flt, client_cache_lifetime=a.client_cache_lifetime, salt=a.salt.encode(),
        include_client_hits=not a.no_client_hits, rdns=rdns, input_format=a.format,
        nfdump_output=a.nfdump_output, nfdump_filter=a.nfdump_filter,
        tz=utc_offset_zone(a.tz_offset), jobs=jobs)
    counters, rows, stages = columnar.make_workload(
        a.inputs, a.output, config, errors, names=a.names, targets=a.targets, stages=a.stages,
        emit=None if a.quiet else stderr_emit)
    c = counters
    print(f"flows read {c.flows_read}, malformed {c.malformed}, paired {c.paired}, filtered "
          f"out {c.filtered_out}, kept {c.kept}, named {c.named}, unnamed dropped "
          f"{c.unnamed_dropped}, client-cache hits {c.client_cache_hits}, notary requests "
          f"{c.notary_requests}; {rows} workload rows -> {a.output}; stages -> {stages}",
          file=sys.stderr)
    return 0
